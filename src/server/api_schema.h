/* api_schema.h — structured outputs for the chat route (api_schema.c). */
#ifndef CI_SRV_API_SCHEMA_H
#define CI_SRV_API_SCHEMA_H
#include "schema.h"
#include "srv_internal.h"

/* response_format {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}:
 * *g (malloc'd) decodes the schema's value. 0, or -1 with e filled (400 naming the field,
 * and for the schema the keyword and where it is). */
int api_json_schema(const json_t *rf, jsc_grammar **g, srv_err *e);
/* The request's tools when one is declared "strict": true: *g holds the reply to free
 * text whose tool calls follow the functions' parameters (tool_choice "required" or a named
 * function: the reply starts inside the call, after the forced opening). *g NULL when no
 * tool is strict. 0, or -1 with e filled. */
int api_tool_grammar(srv *s, const json_t *req, jsc_grammar **g, srv_err *e);

#endif
