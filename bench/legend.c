/* What every column of the reports means: printed under a table's title
 * (bench/table.c), so no output needs the source to be read. */
#include <string.h>

#include "common.h"

static const struct {
  const char *col, *what;
} legend[] = {
    {"precision", "attention precision of the call (HIGH = f16/f32 inputs, f32 math)"},
    {"backend", "lpattn backend that ran the call"},
    {"k", "ThriftAttention: KV tiles per query tile kept in high precision"},
    {"rel_rmse", "relative RMS error of the output vs exact f64 attention, ||O - O_ref|| / ||O_ref||"},
    {"max_abs", "largest absolute output error vs f64"},
    {"nan_inf", "outputs that are NaN or Inf"},
    {"time_ms", "wall time of one call, milliseconds"},
    {"x_HIGH", "time of the call / time of the HIGH call"},
    {"ms", "wall time of one call, milliseconds (best of several)"},
    {"seconds", "wall time of the row, seconds"},
    {"H_mean", "mean row entropy of the attention weights (nats)"},
    {"H_min", "smallest row entropy (nats)"},
    {"H_max", "largest row entropy (nats)"},
    {"max_dH", "largest |entropy - f64 entropy| over rows (nats)"},
    {"max_dLSE", "largest |log-sum-exp - f64 value| over rows"},
    {"dist", "input distribution: uniform U(x0 - Am, x0 + Am) or hybrid N(x0, 1) plus rare N(0, Am^2) spikes"},
    {"sweep", "the parameter this row varies (x0 or Am)"},
    {"x0", "mean (bias) of the inputs"},
    {"Am", "amplitude of the inputs"},
    {"f32_rmse", "relative RMS error of f32 flash attention"},
    {"f32_naninf_pct", "% of f32 outputs that are NaN/Inf"},
    {"f16s_rmse", "relative RMS error with f16 scores (the overflow-prone baseline)"},
    {"f16s_naninf_pct", "% of f16-score outputs that are NaN/Inf"},
    {"pasa_rmse", "relative RMS error of PASA (f16 scores after pseudo-average shifting)"},
    {"pasa_naninf_pct", "% of PASA outputs that are NaN/Inf"},
    {"pasa_ms", "wall time of the PASA call, milliseconds"},
    {"low", "format of the tiles not selected (NVFP4, MXFP4 or FP8)"},
    {"config", "which tiles are high: all, none (all low), diagonal only, or a Thrift budget"},
    {"high_tiles", "share of the visible (query tile, KV tile) pairs computed in high precision"},
    {"rec_vs_all_low", "share of the all-low error recovered: 1 - err / err(all tiles low)"},
    {"rec_vs_diag", "share of the diagonal-only error recovered: 1 - err / err(diagonal high)"},
    {"budget", "Thrift budget f: the fraction of tiles kept high"},
    {"selection", "how the high tiles were chosen (top-k by score, random, local band, sink + local)"},
    {"sim_vs_lib", "relative difference between the tile simulator and the library (same selection)"},
    {"S", "sequence length (tokens)"},
    {"tiles", "KV tiles of the sequence"},
    {"rmse_high", "relative RMS error, every tile high"},
    {"rmse_all_low", "relative RMS error, every tile low (leaky)"},
    {"rmse_diag", "relative RMS error, only the diagonal tiles high"},
    {"k_5", "Thrift k at budget 5%"}, {"k_10", "Thrift k at budget 10%"}, {"k_25", "Thrift k at budget 25%"},
    {"rec_5", "error recovered vs all low at 5%"}, {"rec_10", "error recovered vs all low at 10%"},
    {"rec_25", "error recovered vs all low at 25%"},
    {"rec_5_diag", "error recovered vs diagonal-only at 5%"},
    {"rec_10_diag", "error recovered vs diagonal-only at 10%"},
    {"rec_25_diag", "error recovered vs diagonal-only at 25%"},
    {"data", "which structure the attention-like data has"},
    {"mode", "causal-safe (the library) or leaky (every tile low, scales span the tile)"},
    {"max_change_O", "largest change of an output row <= t when tokens after t change (0 = no leak)"},
    {"max_change_LSE", "the same for the log-sum-exp"},
    {"bitwise_equal", "rows <= t bitwise unchanged"},
    {"max_abs_diff", "largest |decode - prefill| over all rows"},
    {"rel_diff", "relative difference decode vs prefill"},
    {"rows_bitwise_equal", "rows where decode and prefill agree bitwise"},
    {"B", "batch"}, {"H", "heads"}, {"D", "head dimension"},
    {"GFLOP/s", "4 * B * H * Sq * Skv * D (halved when causal) / time"},
    {"ms_without", "time without the entropy output, ms"},
    {"ms_with", "time with the entropy output, ms"},
    {"overhead_pct", "extra time the entropy output costs, %"},
};

const char *bench_column_meaning(const char *col) {
  for (size_t i = 0; i < sizeof legend / sizeof legend[0]; i++)
    if (!strcmp(legend[i].col, col)) return legend[i].what;
  return NULL;
}
