# Sourced on the GPU machine (no network, no Debian dev packages): points CMake
# and the loader at the dependencies unpacked under .deps/root, which the lead
# carries along (tools/make_device_deps.sh makes it here).
_ms_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -d "$_ms_root/.deps/root/usr" ]; then
  export CMAKE_PREFIX_PATH="$_ms_root/.deps/root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$_ms_root/.deps/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
