/* cmd_device.h — the --device flag (and --no-graphs, --mmap, --bf16-act) shared by the
 * commands that run a model (generate, logits, bench, perplexity, chat, serve).
 *
 *   --device cpu|cuda|auto   ci_model_opts.device: 0 cpu (the default), 1 cuda, 2 auto (CUDA
 *                            when a device is present and the family has a CUDA path, else
 *                            the CPU; the library decides and ci_model_info.backend says)
 *   --no-graphs              ci_model_opts.no_graphs: CUDA graph replay off (debugging)
 *   --mmap                   ci_model_opts.map_weights: the CPU reads the mapped files in place
 *   --bf16-act               ci_model_opts.bf16_act: bf16 dot products on AVX512-BF16 CPUs
 *
 * The value is parsed strictly: anything else is a usage error (exit status 2). */
#ifndef CI_CMD_DEVICE_H
#define CI_CMD_DEVICE_H

/* "cpu" -> 0, "cuda" -> 1, "auto" -> 2 into *out and returns 0; else prints
 * "cinfer: CMD: --device expects cpu, cuda or auto, got 'V'" on stderr and returns 2. */
int cli_device(const char *cmd, const char *v, int *out);

#endif
