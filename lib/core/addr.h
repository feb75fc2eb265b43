/* A socket address as text, the one spelling keys and log lines use:
 * "ip:port" for IPv4, "[ip]:port" for IPv6, numeric in inet_ntop's form, so
 * that two spellings of one address ("[::1]:80", "[0:0:0:0:0:0:0:1]:80")
 * are one key (an endpoint's identity, an inbound listener's). */
#ifndef MTD_ADDR_H
#define MTD_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

/* MTD_ADDR_TEXT_SIZE bytes always hold the text. */
#define MTD_ADDR_TEXT_SIZE 64

/* sa (AF_INET or AF_INET6) as text into buf (size bytes, NUL-terminated,
 * cut if too small); returns buf. */
const char *mtd_addr_text(const struct sockaddr_storage *sa, char *buf, size_t size);

#endif
