/* The thread-local detail of the last failed call (lpattn_last_error): each
 * public entry point clears it, each validation failure says which argument,
 * what was expected and what was given. Not installed. */
#ifndef LPATTN_ERROR_H
#define LPATTN_ERROR_H

#include "lpattn.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define LP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define LP_PRINTF(a, b)
#endif

/* Forget the previous call's detail (entry of every public function). */
void lp_err_clear(void);
/* Set the detail (printf-style) and return st. */
lpattn_status lp_fail(lpattn_status st, const char *fmt, ...) LP_PRINTF(2, 3);
/* st != OK: name the argument in front of the detail ("q" + ".shape[2] = 0
 * ..." or "params: ..."); a failure without detail gets the status string. */
lpattn_status lp_err_arg(lpattn_status st, const char *name);
/* A backend's answer: a failure that left no detail says which backend and
 * operation answered it. */
lpattn_status lp_err_backend(lpattn_status st, const lpattn_ctx *ctx, const char *op);
const char *lp_dtype_name(lpattn_dtype t);
/* "<a>.shape = {..}, expected {..}" / "<a>.dtype = X, expected <want>"
 * (core/validate.c). */
lpattn_status lp_shape_fail(const char *a, const int64_t got[4], const int64_t want[4]);
lpattn_status lp_dtype_fail(const char *a, lpattn_dtype got, const char *want);

/* Return the failure of expr as it is (the one TRY of core). */
#define LP_TRY(expr)                                       \
  do {                                                     \
    lpattn_status st_ = (expr);                            \
    if (st_ != LPATTN_OK) return st_;                      \
  } while (0)

/* Return the failure of expr with the argument's name in front. */
#define LP_TRY_ARG(name, expr)                             \
  do {                                                     \
    lpattn_status st_ = (expr);                            \
    if (st_ != LPATTN_OK) return lp_err_arg(st_, (name));  \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif /* LPATTN_ERROR_H */
