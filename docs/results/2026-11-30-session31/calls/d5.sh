# call 5: where the eager small call's host time goes: CUDA API calls per yali call, s31 vs base (nsys), and perf if present
set -u; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for n in s31:. base:scratch/base-shared-src; do t=${n%%:*}; s=${n#*:}; [ -x build-ab-$t/bench/yali-perf ] || (cmake -S $s -B build-ab-$t -G Ninja -DCMAKE_BUILD_TYPE=Release -DYALI_BUILD_TESTS=OFF -DYALI_BUILD_EXAMPLES=OFF >/dev/null && cmake --build build-ab-$t -j 14 --target yali-perf > /dev/null; echo "$t build rc=$?") & done; wait
NSYS=$(ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1); echo "nsys=$NSYS perf=$(which perf)"
mkdir -p /tmp/o/ns
for t in s31 base; do
  for r in 1 2; do YALI_NO_MPIRUN=1 timeout 60 bash scripts/launch_ranks.sh 2 build-ab-$t/bench/yali-perf -g 1 -b 4K -e 4K -d bfloat16 -n 5000 -w 100 --inplace 0 --impl yali -G 0 > /tmp/o/ns/${t}_r$r.txt 2>&1; echo "$t eager 4K np2 r$r: $(awk '$1=="yali"{printf "%s=%s ", $2, $6}' /tmp/o/ns/${t}_r$r.txt)"; done
  timeout 60 build-ab-$t/bench/yali-perf -g 2 -b 4K -e 4K -d bfloat16 -n 5000 -w 100 --inplace 0 --impl yali -G 0 > /tmp/o/ns/${t}_g2.txt 2>&1; echo "$t eager 4K -g 2: $(awk '$1=="yali"{printf "%s=%s ", $2, $6}' /tmp/o/ns/${t}_g2.txt)"
  [ -n "$NSYS" ] && timeout 120 $NSYS profile -t cuda,osrt -o /tmp/o/ns/$t --force-overwrite true --stats=false build-ab-$t/bench/yali-perf -g 2 -b 4K -e 4K -d bfloat16 -n 5000 -w 100 --inplace 0 --impl yali -G 0 > /tmp/o/ns/${t}_nsys.txt 2>&1 && \
    timeout 120 $NSYS stats -r cuda_api_sum,osrt_sum -f csv -o /tmp/o/ns/${t}_st /tmp/o/ns/$t.nsys-rep >> /tmp/o/ns/${t}_nsys.txt 2>&1
  ls /tmp/o/ns/ | grep "${t}_st" ; for f in /tmp/o/ns/${t}_st*cuda_api_sum*.csv; do [ -f $f ] && { echo "== $t cuda api (calls, total ns)"; awk -F, 'NR>1{gsub(/"/,""); printf "%s calls=%s total=%s avg=%s\n", $9, $3, $2, $4}' $f | head -25; }; done
done
rm -f /tmp/o/ns/*.sqlite; tar czf $OUT/ns.tgz -C /tmp/o ns; echo "t=$SECONDS s"
