/* A socket address as text (addr.h). */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>

#include "core/addr.h"

const char *mtd_addr_text(const struct sockaddr *sa, char *buf, size_t size)
{
	char ip[INET6_ADDRSTRLEN];
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
		snprintf(buf, size, "[%s]:%u", ip, (unsigned)ntohs(s6->sin6_port));
	} else {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
		snprintf(buf, size, "%s:%u", ip, (unsigned)ntohs(s4->sin_port));
	}
	return buf;
}
