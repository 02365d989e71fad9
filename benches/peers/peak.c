/* The machine's peak fp32 FMA rate with its widest vectors: every thread (OpenMP) runs 12
   independent chains of FMAs (enough to cover the latency of two FMA pipes) on 512-bit
   vectors where the compiler targets AVX-512 (-march=native on such a host), else 256-bit
   ones; the best of 5 rounds is printed in GFLOP/s (2 flops per lane per FMA), then the
   vector width in bits. Built and run by compare.py. */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>

#ifdef __AVX512F__
typedef __m512 vec;
#define LANES 16
#define SPLAT _mm512_set1_ps
#define FMA _mm512_fmadd_ps
#define FIRST(v) _mm512_cvtss_f32(v)
#else
typedef __m256 vec;
#define LANES 8
#define SPLAT _mm256_set1_ps
#define FMA _mm256_fmadd_ps
#define FIRST(v) _mm256_cvtss_f32(v)
#endif

int main(void) {
    const long iters = 20000000;
    double best = 0;
    for (int round = 0; round < 5; round++) {
        double t = omp_get_wtime();
        float sink = 0;
#pragma omp parallel reduction(+ : sink)
        {
            vec a[12];
            const vec m = SPLAT(0.999999f), c = SPLAT(1e-7f);
            for (int k = 0; k < 12; k++) a[k] = SPLAT((float)k);
            for (long i = 0; i < iters; i++)
                for (int k = 0; k < 12; k++) a[k] = FMA(a[k], m, c);
            for (int k = 0; k < 12; k++) sink += FIRST(a[k]);
        }
        t = omp_get_wtime() - t;
        double flops = 2.0 * LANES * 12 * (double)iters * omp_get_max_threads();
        if (flops / t > best) best = flops / t;
        if (sink == 12345.0f) printf("#");
    }
    printf("%.1f %d\n", best / 1e9, LANES * 32);
    return 0;
}
