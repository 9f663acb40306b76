// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The socket hooks of the default network's Services (lib/sock_lb.h). */
#include "../lib/common.h"
#include "../lib/sock_lb.h"

/*
 * Attached as pinned bpf links to a cgroup2 directory (the unified
 * hierarchy's root on a node), so they run for every socket of every process
 * below it; sdn_sock_netns picks the ones of this node's net 0. connect and
 * sendmsg rewrite a frontend into a backend and return 1, or refuse a
 * frontend without backends with ECONNREFUSED (0 after bpf_set_retval).
 * recvmsg and getpeername show a translated socket's peer as the frontend
 * and always return 1 (the kernel accepts nothing else there).
 */
SEC("cgroup/connect4")
int sdn_sock_connect4(struct bpf_sock_addr *ctx)
{
	return sdn_sock_fwd4(ctx, SDN_SOCK_STAT_CONNECT);
}

SEC("cgroup/connect6")
int sdn_sock_connect6(struct bpf_sock_addr *ctx)
{
	return sdn_sock_fwd6(ctx, SDN_SOCK_STAT_CONNECT);
}

/* Unconnected UDP: every datagram sent with an address. */
SEC("cgroup/sendmsg4")
int sdn_sock_sendmsg4(struct bpf_sock_addr *ctx)
{
	return sdn_sock_fwd4(ctx, SDN_SOCK_STAT_SENDMSG);
}

SEC("cgroup/sendmsg6")
int sdn_sock_sendmsg6(struct bpf_sock_addr *ctx)
{
	return sdn_sock_fwd6(ctx, SDN_SOCK_STAT_SENDMSG);
}

/* A UDP datagram's source, as recvfrom()/recvmsg() report it. */
SEC("cgroup/recvmsg4")
int sdn_sock_recvmsg4(struct bpf_sock_addr *ctx)
{
	return sdn_sock_rev4(ctx);
}

SEC("cgroup/recvmsg6")
int sdn_sock_recvmsg6(struct bpf_sock_addr *ctx)
{
	return sdn_sock_rev6(ctx);
}

SEC("cgroup/getpeername4")
int sdn_sock_getpeername4(struct bpf_sock_addr *ctx)
{
	return sdn_sock_rev4(ctx);
}

SEC("cgroup/getpeername6")
int sdn_sock_getpeername6(struct bpf_sock_addr *ctx)
{
	return sdn_sock_rev6(ctx);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
