#!/usr/bin/env python3
"""Write the seed corpus of the fuzz targets into tests/fuzz/corpus/.

Record seeds follow the version 1 layout documented in src/core/record.c
(little-endian): 'I' 'D', version, state, fence u64, locked_until,
expires_at, created_at, updated_at i64, fingerprint[32], status u16,
headers_len u32, body_len u32, then headers and body.
Run it again after changing the format; the output is deterministic.
"""
import hashlib
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def record(state, fence, status=0, headers=b"", body=b"", version=1):
    fp = hashlib.sha256(b"seed %d" % fence).digest()
    t = 1_767_225_600_000  # 2026-01-01T00:00:00Z in ms
    head = struct.pack("<2sBBQqqqq32sHII", b"ID", version, state, fence,
                       t + 30_000, t + 86_400_000, t, t + 5, fp, status,
                       len(headers), len(body))
    assert len(head) == 86
    return head + headers + body


RECORDS = {
    "processing": record(1, 1),
    "completed": record(2, 3, 201,
                        b"Content-Type: application/json\r\nLocation: /o/7\r\n",
                        b'{"id":7,"status":"created"}'),
    "failed": record(3, 2, 422, b"", b"no such account"),
    "unseen": record(0, 9),
    "body_only": record(2, 1, 204, b"", b"\x00\x01\xff"),
    "bad_version": record(2, 1, version=2),
}

JSON = {
    "object": b'{"b":1,"a":[true,false,null],"c":{"y":"\\u00e9","x":-1.5e3}}',
    "nested": b'[[[{"k":[{}]}]]]',
    "strings": b'["\\"\\\\\\/\\b\\f\\n\\r\\t","\\ud83d\\ude00","\xc3\xa9\xe2\x82\xac"]',
    "numbers": b"[0,-0,1.0,1e10,1E-2,123456789012345678901234567890]",
    "spaces": b' \t\r\n{ "a" : 1 , "A" : 2 }\n',
    "scalar": b'"just a string"',
    "dupe": b'{"A":1,"\\u0041":2}',
}

KEYS = {
    "token": b"8e03978e-40d5-43e8-bc93-6894a57f9324",
    "sf_string": b'"order 42: \\"rush\\" \\\\ now"',
    "padded": b' \t abc-DEF_123 \t',
    "long": b"k" * 255,
    "too_long": b"k" * 256,
    "space": b"a b",
}


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def log_batch(seq, entries):
    """One batch of the LMDB store's log (src/store/lmdb_logfmt.h): entries
    are (kind, scoped key, value); kind 1 put, 2 delete."""
    payload = b"".join(struct.pack("<BHIq", k, len(key), len(val), 1 << 50) + key + val
                       for k, key, val in entries)
    head = struct.pack("<4sIQI", b"IDLB", len(payload), seq, len(entries))
    return head + struct.pack("<I", crc32c(head + payload, 0)) + payload


def skey(scope, key):
    return bytes([len(scope)]) + scope + key


# fuzz_lmdb_log puts a valid file header before its input: seeds are batches
LOG = {
    "one": log_batch(1, [(1, skey(b"", b"order-1"), RECORDS["completed"])]),
    "two": log_batch(5, [(1, skey(b"t", b"a"), RECORDS["processing"]), (2, skey(b"", b"b"), b"")])
    + log_batch(6, [(1, skey(b"", b"c"), RECORDS["failed"])]),
    "stale": log_batch(9, [(2, skey(b"", b"x"), b"")]) + log_batch(4, [(2, skey(b"", b"y"), b"")]),
}


def write(target, seeds):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


write("fuzz_record_decode", RECORDS)
write("fuzz_json", JSON)
write("fuzz_key_parse", KEYS)
write("fuzz_lmdb_log", LOG)
