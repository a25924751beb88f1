/*
 * store_id.h - what names a store: the records a store URI reaches, as
 * text, the same for every spelling of one store (credentials and the
 * options that do not choose the records left out). The spool files its
 * entries under it, and the caches of a process are kept per store by it.
 */
#ifndef IDEM_STORE_STORE_ID_H
#define IDEM_STORE_STORE_ID_H

#include <stddef.h>

/* The identity of uri into out (len bytes; 4200 hold any). */
void idem_store_identity(const char *uri, char *out, size_t len);
/* The identity of uri as written, the form before idem_store_identity read
 * a URI's meaning: the spool adopts entries filed under it. */
void idem_store_written_identity(const char *uri, char *out, size_t len);

#endif
