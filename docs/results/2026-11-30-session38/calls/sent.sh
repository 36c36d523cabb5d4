# sentinels of the tree under test (the device's .git is stale); LC_ALL=C: the glob's order follows the locale
export LC_ALL=C
echo "sentinel src=$(cat src/nccl_abi/*.cc src/nccl_abi/*.h 2>/dev/null | md5sum | cut -c1-8) lib=$(find src include -type f | sort | xargs cat | md5sum | cut -c1-8) tests=$(cat tests/gpu/*.py | md5sum | cut -c1-8) nocolor=$(grep -c fakeLastSplitNewcomm tests/host/fake_nccl.cc)"
