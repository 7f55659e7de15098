/* web.c — GET / and the chat page's files (web.h). They are served without the API key
 * (they hold nothing secret; the page asks for the key when the API answers 401), never
 * cached stale (no-cache), and under a content security policy that allows this origin's
 * scripts and styles only. */
#include "web.h"
#include "srv_internal.h"
#include <string.h>

const web_asset *web_find(const char *url) {
    if (!strcmp(url, "/")) url = "/index.html";
    for (int i = 0; i < web_n_assets; i++)
        if (!strcmp(web_assets[i].path, url)) return &web_assets[i];
    return NULL;
}

enum MHD_Result srv_reply_page(srv *s, struct MHD_Connection *c, const char *url) {
    const web_asset *a = web_find(url);
    if (!a) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", a->type);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
    srv_count_status(s, 200);
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return rc;
}
