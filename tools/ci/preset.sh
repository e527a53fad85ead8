# For the sanitizer suites to source: configures one of CMakePresets.json's
# presets with warnings as errors, through ccache when the machine has it,
# unless its build directory is configured already (then the build is
# incremental).
#
#   source tools/ci/preset.sh
#   configure_preset PRESET BUILD_DIR

configure_preset() {
  local preset=$1 dir=$2
  local launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  if [[ ! -f $dir/build.ninja ]]; then
    cmake --preset "$preset" -DTANDEM_WERROR=ON "${launcher[@]}" >/dev/null
  fi
}
