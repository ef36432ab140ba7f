export PATH=/usr/local/cuda/bin:$PATH
B=/tmp/b1
[ -d $B ] || meson setup $B -Dcuda=enabled -Dnvidia_archs=90a -Dcpu=disabled --buildtype=release >/dev/null; ninja -C $B >$OUT/build.log 2>&1 || exit 1
for k in wgl_nvfp4 wgl_fp8; do
timeout 150 ncu -k regex:$k --launch-count 1 --section SchedulerStats --section WarpStateStats --section SpeedOfLight $B/bench/cuda/bench_cuda prefill-16k > $OUT/ncu_$k.txt 2>&1
grep -E "Issued Ipc|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|SM Busy|Compute \(SM\) Throughput|Duration" $OUT/ncu_$k.txt | head -20
done
