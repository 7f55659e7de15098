/* web.h — the chat page that `cinfer serve` answers GET / with: the files of src/server/web/
 * compiled in (build/generated/web_assets.c, written by src/server/web/embed.cmake), each
 * under "/" + its file name; index.html is also "/". */
#ifndef CI_SRV_WEB_H
#define CI_SRV_WEB_H
#include <stddef.h>

typedef struct {
    const char *path;          /* "/chat.js" */
    const char *type;          /* its Content-Type */
    const unsigned char *data;
    size_t len;
} web_asset;

extern const web_asset web_assets[];
extern const int web_n_assets;

/* The asset served at url ("/" is "/index.html"), or NULL. */
const web_asset *web_find(const char *url);

#endif
