/* STREAM-style triad, a[i] = b[i] + s*c[i] on 2^25 floats with OpenMP threads: the machine's
   memory bandwidth, counted as STREAM does (three arrays, no write-allocate traffic). Prints
   the best of 10 in GB/s. Built and run by compare.py. */
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>

int main(void) {
    const long n = 1L << 25;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    if (!a || !b || !c) return 1;
#pragma omp parallel for
    for (long i = 0; i < n; i++) { a[i] = 0.0f; b[i] = 1.0f; c[i] = 2.0f; }
    double best = 1e30;
    for (int r = 0; r < 10; r++) {
        double t = omp_get_wtime();
#pragma omp parallel for
        for (long i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
        t = omp_get_wtime() - t;
        if (t < best) best = t;
    }
    printf("%.3f\n", 3.0 * sizeof(float) * n / best / 1e9);
    return a[n / 2] == 7.0f ? 0 : 2;
}
