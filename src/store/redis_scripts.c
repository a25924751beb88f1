/*
 * redis_scripts.c - the Lua side of the Redis store: idem_transition()
 * (src/core/transition.c) line by line, run atomically by the server with
 * the server's clock. Keep the two in step: the contract suite runs both.
 *
 * The record is a hash under one key whose expiry (PEXPIREAT) is the
 * record's expires_at, which a claim sets at least one lease past the end of
 * its lease (so a takeover still finds the fence, and a late worker's finish
 * still finds the record to be refused by):
 * Redis forgets a record exactly when idem would call it expired, never
 * while it is processing. A released record stays (state 0) until then, so
 * its fence keeps counting.
 *
 * KEYS[1]  the record
 * ARGV     op ("claim", "complete", "fail", "release", "get"), fingerprint
 *          (32 raw bytes), fence (decimal), lease_ms, ttl_ms, flags, status,
 *          headers, body
 * reply    {err, outcome, fence, retry_after_ms [, state, fp, fence,
 *          locked_until, expires_at, created_at, updated_at, status, headers,
 *          body]}: err 0 or an IDEM_E* code, the record fields as stored
 *          (strings) when the caller gets the record back
 *
 * Numbers: times are milliseconds, exact in Lua's doubles until the year
 * 285,000; fences are compared as decimal strings, so they are exact to
 * 2^64, and counted up in doubles, exact to 2^53.
 */
#include <openssl/sha.h>
#include <pthread.h>

#include "core/text.h"
#include "idem/idem.h"
#include "store/redis.h"

_Static_assert(IDEM_ESTALE == -6 && IDEM_ENOTFOUND == -7 && IDEM_EINVAL == -1,
               "the Lua script hard-codes these error codes");
_Static_assert(IDEM_CLAIMED == 1 && IDEM_REPLAY == 2 && IDEM_MISMATCH == 3 && IDEM_BUSY == 4,
               "the Lua script hard-codes these outcomes");
_Static_assert(IDEM_STATE_UNSEEN == 0 && IDEM_STATE_PROCESSING == 1 &&
                   IDEM_STATE_COMPLETED == 2 && IDEM_STATE_FAILED == 3,
               "the Lua script hard-codes these states");
_Static_assert(IDEM_CLAIM_REPLAY_FAILED == 1, "the Lua script tests flag bit 1");

const char idem_redis_script[] =
    /* Redis 3.2-4.0 refuse writes after TIME unless effects are replicated;
     * from 5.0 that is the default (and from 7.0 the only way) */
    "if redis.replicate_commands then redis.replicate_commands() end\n"
    "local k = KEYS[1]\n"
    "local op, fp, fence = ARGV[1], ARGV[2], ARGV[3]\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local function int(x) return string.format('%d', x) end\n"
    "local v = redis.call('HMGET', k, 'state', 'fp', 'fence', 'locked_until',\n"
    "  'expires_at', 'created_at', 'updated_at', 'status', 'headers', 'body')\n"
    "local cur = nil\n"
    "if v[1] and v[3] and v[5] then\n"
    "  cur = {state = tonumber(v[1]), fp = v[2], fence = v[3],\n"
    "    locked_until = tonumber(v[4]) or 0, expires_at = tonumber(v[5]) or 0,\n"
    "    created_at = tonumber(v[6]) or 0}\n"
    "end\n"
    /* released or past retention: unseen, but the fence counts on */
    "local live = cur ~= nil and cur.state ~= 0 and now < cur.expires_at\n"
    "local function show(outcome)\n"
    "  local r = {0, outcome, cur.fence, 0}\n"
    "  for i = 1, 10 do r[4 + i] = v[i] end\n"
    "  return r\n"
    "end\n"
    "if op == 'claim' then\n"
    "  local function take()\n"
    "    local nf = int((cur and tonumber(cur.fence) or 0) + 1)\n"
    "    local lu = now + tonumber(ARGV[4])\n"
    "    local exp = math.max(now + tonumber(ARGV[5]), lu + tonumber(ARGV[4]))\n"
    "    local created = live and cur.created_at or now\n"
    "    redis.call('HSET', k, 'state', '1', 'fp', fp, 'fence', nf,\n"
    "      'locked_until', int(lu), 'expires_at', int(exp), 'created_at', int(created),\n"
    "      'updated_at', int(now), 'status', '0', 'headers', '', 'body', '')\n"
    "    redis.call('PEXPIREAT', k, int(exp))\n"
    "    return {0, 1, nf, 0}\n"
    "  end\n"
    "  if not live then return take() end\n"
    "  if cur.fp ~= fp then return show(3) end\n"
    "  if cur.state == 2 then return show(2) end\n"
    "  if cur.state == 3 then\n"
    "    if tonumber(ARGV[6]) % 2 == 1 then return show(2) end\n"
    "    return take()\n"
    "  end\n"
    "  if cur.state == 1 and now < cur.locked_until then\n"
    "    return {0, 4, cur.fence, cur.locked_until - now}\n"
    "  end\n"
    "  return take()\n"
    "end\n"
    "if op == 'complete' or op == 'fail' or op == 'release' then\n"
    /* only the holder of the current fence ends the processing state */
    "  if cur == nil or cur.state ~= 1 or cur.fence ~= fence or now >= cur.expires_at then\n"
    "    return {-6, 0, '0', 0}\n"
    "  end\n"
    "  if op == 'release' then\n"
    "    redis.call('HSET', k, 'state', '0', 'locked_until', '0', 'updated_at', int(now),\n"
    "      'status', '0', 'headers', '', 'body', '')\n"
    "  else\n"
    "    local exp = now + tonumber(ARGV[5])\n"
    "    redis.call('HSET', k, 'state', op == 'complete' and '2' or '3',\n"
    "      'locked_until', '0', 'expires_at', int(exp), 'updated_at', int(now),\n"
    "      'status', ARGV[7], 'headers', ARGV[8], 'body', ARGV[9])\n"
    "    redis.call('PEXPIREAT', k, int(exp))\n"
    "  end\n"
    "  return {0, 0, cur.fence, 0}\n"
    "end\n"
    "if op == 'get' then\n"
    "  if not live then return {-7, 0, '0', 0} end\n"
    "  return show(0)\n"
    "end\n"
    "return {-1, 0, '0', 0}\n";

const size_t idem_redis_script_len = sizeof idem_redis_script - 1;

static char script_sha[41];
static pthread_once_t sha_once = PTHREAD_ONCE_INIT;

static void compute_sha(void) {
  unsigned char md[SHA_DIGEST_LENGTH];
  SHA1((const unsigned char *)idem_redis_script, sizeof idem_redis_script - 1, md);
  idem_hex_encode(md, SHA_DIGEST_LENGTH, script_sha);
}

const char *idem_redis_script_sha(void) {
  pthread_once(&sha_once, compute_sha);
  return script_sha;
}
