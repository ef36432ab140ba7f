/* Version, status and backend names: the strings of the public enums, used
 * by every other part of core (a leaf: it calls nothing). */
#include "lpattn.h"

unsigned lpattn_version_number(void) { return LPATTN_VERSION_NUMBER; }
const char *lpattn_version_string(void) { return LPATTN_VERSION_STRING; }

const char *lpattn_status_string(lpattn_status s) {
  switch (s) {
    case LPATTN_OK: return "ok";
    case LPATTN_ERR_INVALID_ARGUMENT: return "invalid argument";
    case LPATTN_ERR_NULL_POINTER: return "required pointer is NULL";
    case LPATTN_ERR_BAD_SHAPE: return "bad or inconsistent shape";
    case LPATTN_ERR_BAD_STRIDE: return "bad stride";
    case LPATTN_ERR_BAD_DTYPE: return "unsupported dtype for this tensor";
    case LPATTN_ERR_BAD_HEAD_DIM: return "unsupported head dimension";
    case LPATTN_ERR_BAD_GQA: return "query heads not a multiple of KV heads";
    case LPATTN_ERR_SIZE_OVERFLOW: return "size overflows";
    case LPATTN_ERR_UNSUPPORTED: return "unsupported by this backend";
    case LPATTN_ERR_UNSUPPORTED_HARDWARE: return "backend not built or no usable device";
    case LPATTN_ERR_OUT_OF_MEMORY: return "out of memory";
    case LPATTN_ERR_NONFINITE: return "non-finite input";
    case LPATTN_ERR_BACKEND: return "backend runtime error";
    case LPATTN_ERR_PARAMS_SIZE: return "params struct_size unknown to this version";
    case LPATTN_ERR_CACHE_FULL: return "KV cache capacity exceeded";
    case LPATTN_ERR_BAD_LAYOUT: return "quantized tensor does not match the request";
    case LPATTN_ERR_BAD_PAGE: return "page id out of range, repeated, or page table too short";
  }
  return "unknown status";
}

const char *lpattn_backend_name(lpattn_backend b) {
  switch (b) {
    case LPATTN_BACKEND_AUTO: return "auto";
    case LPATTN_BACKEND_REF: return "ref";
    case LPATTN_BACKEND_CPU: return "cpu";
    case LPATTN_BACKEND_CUDA: return "cuda";
    case LPATTN_BACKEND_HIP: return "hip";
  }
  return "unknown";
}
