/* The fuzz target without libFuzzer: replays the files (or every file of the
 * folders) named on the command line, then runs seeded random inputs.
 *   fuzz_api [-runs=N] [-seed=S] [-max_len=L] [file|folder ...]
 * A broken promise aborts (fuzz_util.h FZ_ASSERT), so does a sanitizer. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  uint8_t buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  LLVMFuzzerTestOneInput(buf, n);
  return 1;
}

static int replay(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  if (!S_ISDIR(st.st_mode)) return replay_file(path);
  DIR *d = opendir(path);
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", path, e->d_name);
    n += replay_file(p);
  }
  closedir(d);
  return n;
}

int main(int argc, char **argv) {
  long runs = 100, max_len = 256;
  unsigned long long seed = 1;
  int files = 0;
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "-runs=", 6)) runs = atol(argv[i] + 6);
    else if (!strncmp(argv[i], "-seed=", 6)) seed = strtoull(argv[i] + 6, NULL, 10);
    else if (!strncmp(argv[i], "-max_len=", 9)) max_len = atol(argv[i] + 9);
    else files += replay(argv[i]);
  }
  if (max_len < 1 || max_len > 4096) max_len = 256;
  uint8_t buf[4096];
  uint64_t x = seed;
  for (long r = 0; r < runs; r++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    size_t n = 1 + (size_t)((x >> 33) % (uint64_t)max_len);
    for (size_t i = 0; i < n; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      buf[i] = (uint8_t)(x >> 56);
    }
    LLVMFuzzerTestOneInput(buf, n);
  }
  printf("fuzz: %d corpus files, %ld random inputs (seed %llu): no promise broken\n", files, runs, seed);
  return 0;
}
