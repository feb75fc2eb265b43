/* A socket address as text, the one spelling keys and log lines use:
 * "ip:port" for IPv4, "[ip]:port" for IPv6, numeric in inet_ntop's form, so
 * that two spellings of one address ("[::1]:80", "[0:0:0:0:0:0:0:1]:80")
 * are one key (an endpoint's identity, an inbound listener's). */
#ifndef MTD_ADDR_H
#define MTD_ADDR_H

#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

/* An IP socket address (AF_INET or AF_INET6), sized for the larger: 28
 * bytes where a struct sockaddr_storage takes 128, for what is kept per
 * endpoint (struct mtd_cfg_addr). sa.sa_family says which member holds it. */
union mtd_sockaddr {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
};

/* MTD_ADDR_TEXT_SIZE bytes always hold the text. */
#define MTD_ADDR_TEXT_SIZE 64

/* sa (AF_INET or AF_INET6) as text into buf (size bytes, NUL-terminated,
 * cut if too small); returns buf. */
const char *mtd_addr_text(const struct sockaddr *sa, char *buf, size_t size);

#endif
