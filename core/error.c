/* lpattn_last_error(): one detail string per thread (core/error.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "internal.h"

#if defined(_MSC_VER)
#define LP_THREAD_LOCAL __declspec(thread)
#else
#define LP_THREAD_LOCAL _Thread_local
#endif

enum { LP_ERR_CAP = 512 };
static LP_THREAD_LOCAL char lp_err[LP_ERR_CAP];

const char *lpattn_last_error(void) { return lp_err; }

void lp_err_clear(void) { lp_err[0] = '\0'; }

lpattn_status lp_fail(lpattn_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(lp_err, sizeof lp_err, fmt, ap);
  va_end(ap);
  return st;
}

lpattn_status lp_err_arg(lpattn_status st, const char *name) {
  if (st == LPATTN_OK) return st;
  char old[LP_ERR_CAP];
  if (lp_err[0]) memcpy(old, lp_err, sizeof old);
  else snprintf(old, sizeof old, "%s", lpattn_status_string(st));
  const char *sep = (old[0] == '.' || old[0] == '[') ? "" : ": ";
  /* name, separator, then as much of the old detail as fits */
  size_t n = 0;
  for (const char *parts[] = {name, sep, old}, **p = parts; p < parts + 3; p++)
    for (const char *c = *p; *c && n + 1 < sizeof lp_err; c++) lp_err[n++] = *c;
  lp_err[n] = '\0';
  return st;
}

lpattn_status lp_err_backend(lpattn_status st, const lpattn_ctx *ctx, const char *op) {
  if (st != LPATTN_OK && !lp_err[0])
    lp_fail(st, "the %s backend answered \"%s\" for %s", lpattn_backend_name(ctx->kind),
            lpattn_status_string(st), op);
  return st;
}

const char *lp_dtype_name(lpattn_dtype t) {
  static const char *const names[] = {"F32", "F16", "BF16", "E4M3", "E5M2", "E2M1", "E8M0", "I32"};
  return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown dtype";
}
