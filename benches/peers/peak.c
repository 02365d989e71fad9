/* The machine's peak fp32 FMA rate: every thread (OpenMP) runs 12 independent chains of
   256-bit FMAs (enough to cover the latency of two FMA pipes), and the best of 5 rounds is
   printed in GFLOP/s (2 flops per lane per FMA). Built and run by compare.py. */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>

int main(void) {
    const long iters = 20000000;
    double best = 0;
    for (int round = 0; round < 5; round++) {
        double t = omp_get_wtime();
        float sink = 0;
#pragma omp parallel reduction(+ : sink)
        {
            __m256 a[12];
            const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
            for (int k = 0; k < 12; k++) a[k] = _mm256_set1_ps((float)k);
            for (long i = 0; i < iters; i++)
                for (int k = 0; k < 12; k++) a[k] = _mm256_fmadd_ps(a[k], m, c);
            for (int k = 0; k < 12; k++) sink += a[k][0];
        }
        t = omp_get_wtime() - t;
        double flops = 2.0 * 8 * 12 * (double)iters * omp_get_max_threads();
        if (flops / t > best) best = flops / t;
        if (sink == 12345.0f) printf("#");
    }
    printf("%.1f\n", best / 1e9);
    return 0;
}
