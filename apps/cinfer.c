#include <stdio.h>
int main(void) { fprintf(stderr, "cinfer: not built yet\n"); return 1; }
