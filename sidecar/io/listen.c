/* Listening sockets (listen.h). */
#include "config.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config/config.h"
#include "sidecar/io/listen.h"

int mtd_listen_check_free(const struct mtd_cfg_addr *a)
{
	int fd = socket(a->sa.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1, rc = 0;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&a->sa, a->salen) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

int mtd_listen_open(const struct mtd_cfg_addr *a)
{
	int fd = socket(a->sa.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
	    bind(fd, (const struct sockaddr *)&a->sa, a->salen) < 0 || listen(fd, 1024) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}
