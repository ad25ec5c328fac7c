// Include first (before <immintrin.h>) from the files built with the AVX-512
// flags (*_avx512.cpp): GCC 12's AVX-512 headers trip -Wuninitialized and
// -Wmaybe-uninitialized on their own _mm512_undefined_* helpers ("__Y = __Y");
// the warnings are about the header, not our code. A diagnostic pragma holds
// from where it stands to the end of the file being compiled, so it must come
// before <immintrin.h>. Pragmas only: nothing here reaches the object code.
#pragma once
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
