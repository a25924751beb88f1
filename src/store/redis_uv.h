/*
 * redis_uv.h - hiredis on a libuv loop (redis_uv.c): the one adapter, for
 * the Redis store and for idem consume's redis:// broker.
 */
#ifndef IDEM_STORE_REDIS_UV_H
#define IDEM_STORE_REDIS_UV_H

#include <hiredis/async.h>
#include <uv.h>

/* Drive ac from loop's poll handle; 0 or -1. When hiredis is done with ac
 * (after its last callback), done(arg) runs, if given: the owner of
 * ac->data may free it then. */
int redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop, void (*done)(void *arg), void *arg);

#endif
