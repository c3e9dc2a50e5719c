/* ops.h — the operations lctd serves, one handler per wire op: host ops (ops_host.c), device ops (ops_device.c) and AUTH (ops_auth.c). */
#ifndef LCT_SERVER_OPS_H
#define LCT_SERVER_OPS_H

#include "request.h"

/* A handler answers its request exactly once, now or when its work ends. */
typedef void (*lct__op_fn)(lct__request *rq);

void lct__op_ping(lct__request *rq);
void lct__op_put(lct__request *rq);
void lct__op_put_begin(lct__request *rq);
void lct__op_put_chunk(lct__request *rq);
void lct__op_put_commit(lct__request *rq);
void lct__op_put_abort(lct__request *rq);
void lct__op_get(lct__request *rq);
void lct__op_delete(lct__request *rq);
void lct__op_stat(lct__request *rq);
void lct__op_list(lct__request *rq);
void lct__op_stats(lct__request *rq);
void lct__op_save(lct__request *rq);

/* PUT_DEVICE and PUT_DEVICE_MANY; GET_DEVICE and GET_DEVICE_MANY. */
void lct__op_put_device(lct__request *rq);
void lct__op_get_device(lct__request *rq);

/* AUTH: a challenge for the connection, or the answer to one. */
void lct__op_auth(lct__request *rq);
/* Decides who sent rq before its op runs: 1, rq->tenant set (NULL: every
 * key); or 0, refused with LCT_EACCES (and a challenge where the connection
 * may still authenticate). A refused request has not run, so a client may
 * send it again once authenticated. */
int lct__admit(lct__request *rq);

#endif
