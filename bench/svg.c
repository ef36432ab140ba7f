/* A horizontal bar chart on a log10 axis, written as a standalone SVG file
 * (no plotting library: the report's figure is a few dozen lines of text). */
#include <math.h>
#include <stdio.h>

#include "common.h"

static void text(FILE *f, double x, double y, const char *anchor, int size, const char *s) {
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\">", x, y, anchor, size);
  for (; *s; s++) {
    if (*s == '&') fputs("&amp;", f);
    else if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else fputc(*s, f);
  }
  fputs("</text>\n", f);
}

int svg_log_bars(const char *path, const char *title, const char *xlabel, int n,
                 const char *const *label, const double *value, const char *const *note) {
  enum { LEFT = 170, BAR = 420, RIGHT = 230, TOP = 50, ROW = 26, BOTTOM = 50 };
  double lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < n; i++)
    if (value[i] > 0 && isfinite(value[i])) {
      if (value[i] < lo) lo = value[i];
      if (value[i] > hi) hi = value[i];
    }
  if (!(lo <= hi)) lo = 1e-3, hi = 1;
  int d0 = (int)floor(log10(lo)), d1 = (int)ceil(log10(hi));
  if (d1 <= d0) d1 = d0 + 1;
  const double W = LEFT + BAR + RIGHT, Hgt = TOP + ROW * n + BOTTOM;
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          W, Hgt);
  text(f, W / 2, 24, "middle", 15, title);
  for (int d = d0; d <= d1; d++) { /* one grid line and label per decade */
    double x = LEFT + BAR * (d - d0) / (double)(d1 - d0);
    char buf[16];
    snprintf(buf, sizeof buf, "1e%d", d);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ccc\"/>\n", x, TOP - 6,
            x, TOP + ROW * n);
    text(f, x, TOP + ROW * n + 16, "middle", 11, buf);
  }
  text(f, LEFT + BAR / 2.0, TOP + ROW * n + 36, "middle", 12, xlabel);
  for (int i = 0; i < n; i++) {
    double y = TOP + ROW * i, v = value[i];
    text(f, LEFT - 8, y + 17, "end", 12, label[i]);
    if (v > 0 && isfinite(v)) {
      double w = BAR * (log10(v) - d0) / (d1 - d0);
      fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"#4477aa\"/>\n",
              LEFT, y + 4, w, ROW - 8);
    }
    if (note && note[i]) text(f, LEFT + BAR + 8, y + 17, "start", 11, note[i]);
  }
  fputs("</svg>\n", f);
  return fclose(f) ? -1 : 0;
}
