/* gemv_cpu.c — single-matrix bf16 decode GEMV of the CPU backend against a raw read loop
 * (issue #15). Not part of the build; from the repository root after a CPU build:
 *   gcc -O2 -Isrc -Iinclude bench/gemv_cpu.c build-cpu/libcinfer.a -lm -lpthread -o /tmp/gemv_cpu
 *   /tmp/gemv_cpu THREADS
 * For each Qwen3-0.6B shape (and the tied head): "hot" is the best of 20 matmuls of one
 * copy (L2/L3 resident when small: the kernel's compute ceiling), "stream" rotates through
 * copies filling 1 GiB, so weights come from DRAM as in decode. The raw read lines sum
 * 1 GiB with AVX2 loads and a software prefetch PF bytes ahead (one thread): what one core
 * can read on this machine; with THREADS > 1 also split over that many threads. */
#define _GNU_SOURCE
#include "backend/backend.h"
#include "core/threads.h"
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
/* CPUTIME=1 (one thread): the caller's CPU time, what to compare on a machine shared with other jobs */
static double now(void){struct timespec t;clock_gettime(getenv("CPUTIME")?CLOCK_THREAD_CPUTIME_ID:CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
__attribute__((target("avx2"))) static double rd(const char *p, size_t n, int pf) {
  __m256i a=_mm256_setzero_si256(),b=a,c=a,d=a;
  for(size_t i=0;i<n;i+=128){ if(pf) _mm_prefetch(p+i+pf,_MM_HINT_T0), _mm_prefetch(p+i+pf+64,_MM_HINT_T0);
   a=_mm256_add_epi64(a,_mm256_load_si256((const __m256i*)(p+i)));b=_mm256_add_epi64(b,_mm256_load_si256((const __m256i*)(p+i+32)));
   c=_mm256_add_epi64(c,_mm256_load_si256((const __m256i*)(p+i+64)));d=_mm256_add_epi64(d,_mm256_load_si256((const __m256i*)(p+i+96)));}
  a=_mm256_add_epi64(_mm256_add_epi64(a,b),_mm256_add_epi64(c,d)); return (double)_mm256_extract_epi64(a,0);
}
/* the raw read split over the backend's pool (each thread its contiguous part) */
typedef struct { const char *p; size_t n; int parts, pf; } rd_ctx;
static void rd_task(void *c, int i) {
  rd_ctx *r = c; size_t a = r->n / r->parts * i, b = r->n / r->parts * (i + 1);
  volatile double v = rd(r->p + a, b - a, r->pf); (void)v;
}
int main(int argc,char**argv){
  int th=argc>1?atoi(argv[1]):1;
  ci_backend *be=ci_backend_cpu_new(th,CI_ISA_AUTO);
  int64_t shapes[][2]={{2048,1024},{3072,1024},{1024,3072},{151936,1024},{65536,1024}};
  size_t big=(size_t)1<<30; char *buf=aligned_alloc(64,big); memset(buf,1,big);
  for(int s=0;s<5;s++){
    int64_t R=shapes[s][0],C=shapes[s][1];
    size_t bytes=(size_t)R*C*2;
    /* many copies so that it comes from memory unless hot */
    int ncopy = bytes*8 < big ? (int)(big/bytes) : 1; if(ncopy>1000) ncopy=1000;
    uint16_t *w=(uint16_t*)buf;
    float *x=malloc(C*4),*y=malloc(R*4); for(int i=0;i<C;i++)x[i]=0.001f*i;
    for(size_t i=0;i<bytes/2;i++) w[i]=0x3f80+(i&7);
    ci_mat W={.data=w,.dtype=CI_BF16,.rows=R,.cols=C};
    // hot
    double best=1e9; for(int r=0;r<20;r++){double t=now(); be->matmul(be,y,x,1,&W); t=now()-t; if(t<best)best=t;}
    // cold: rotate through copies
    double bc=1e9; for(int r=0;r<3;r++){ double t=now(); for(int k=0;k<ncopy;k++){W.data=buf+(size_t)k*bytes; be->matmul(be,y,x,1,&W);} t=(now()-t)/ncopy; if(t<bc)bc=t;}
    printf("[%lld x %lld] %.1f MB: hot %.1f GB/s  stream(%d copies) %.1f GB/s\n",(long long)R,(long long)C,bytes/1e6,bytes/best/1e9,ncopy,bytes/bc/1e9);
    W.data=w;
  }
  for(int pf=0;pf<=2048;pf+=512){double b=1e9; for(int r=0;r<3;r++){double t=now(); volatile double v=rd(buf,big,pf);(void)v; t=now()-t; if(t<b)b=t;} printf("raw read 1 thread pf=%d: %.1f GB/s\n",pf,big/b/1e9);}
  if (th > 1 && be->pool)
    for (int pf = 0; pf <= 1024; pf += 512) {
      rd_ctx c = { buf, big, th, pf }; double b = 1e9;
      for (int r = 0; r < 3; r++) { double t = now(); ci_pool_run(be->pool, rd_task, &c, th); t = now() - t; if (t < b) b = t; }
      printf("raw read %d threads pf=%d: %.1f GB/s\n", th, pf, big / b / 1e9);
    }
  return 0;
}
