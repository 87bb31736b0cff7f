/* Force-included into the llama.cpp build of the Python wheel (Makefile: LLAMA_CFLAGS).
 *
 * ggml-cpu's kernels read fp16 scales through this table, which ggml-cpu.c defines and nothing
 * outside libggml-cpu uses. In a shared library a default-visibility global is reached through
 * the GOT, and GCC then allocates the registers of the hot tinyBLAS loops differently (more
 * spills): prompt passes ran ~3-4% slower than in llama.cpp's static binaries from the same
 * sources. Declared hidden, the code is the static build's (docs/benchmarks.md, issue #12). */
#ifdef __cplusplus
extern "C" {
#endif
extern float ggml_table_f32_f16[1 << 16] __attribute__((visibility("hidden")));
#ifdef __cplusplus
}
#endif
