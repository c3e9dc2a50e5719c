/* ops.h — the operations lctd serves, one handler per wire op: host ops (ops_host.c) and device ops (ops_device.c). */
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

#endif
