/* cmd_device.c — parsing --device (see cmd_device.h). */
#include "cmd_device.h"
#include <stdio.h>
#include <string.h>

int cli_device(const char *cmd, const char *v, int *out) {
    static const char *const names[] = { "cpu", "cuda", "auto" };
    for (int i = 0; i < 3; i++)
        if (!strcmp(v, names[i])) { *out = i; return 0; }
    fprintf(stderr, "cinfer: %s: --device expects cpu, cuda or auto, got '%s'\n", cmd, v);
    return 2;
}
