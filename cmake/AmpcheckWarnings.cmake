# Project code compiles with warnings as errors; third-party headers come in as SYSTEM
# through their imported targets, so their warnings are not ours.
function(ampcheck_project_target target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Werror>
    # Floating point as written: no a*b+c contracted into one fma where a target enables
    # FMA (GCC contracts by default even in ISO C++ mode), so every vector width and the
    # GPU (--fmad=false) round the same way; and no errno from sqrt, so that IEEE sqrt
    # loops vectorize (kernels/cpu/vectorize.h). Neither changes a result.
    $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off -fno-math-errno>
    # GCC 12 at -O3 flags std::string concatenation in libstdc++ itself (GCC bug 105329).
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  target_compile_features(${target} PUBLIC cxx_std_20)
endfunction()
