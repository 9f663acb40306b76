// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The two hooks on the host side of every pod veth. One object, because both
 * are attached by the CNI to the same device and share every map.
 */
#include "../lib/common.h"
#include "../lib/arp.h"
#include "../lib/autoconf.h"
#include "../lib/bridge.h"
#include "../lib/bridge_sg.h"
#include "../lib/crossnet.h"
#include "../lib/dnat.h"
#include "../lib/dns.h"
#include "../lib/doors.h"
#include "../lib/drop.h"
#include "../lib/egress.h"
#include "../lib/endpoint.h"
#include "../lib/hostfw.h"
#include "../lib/lb.h"
#include "../lib/lb_reject.h"
#include "../lib/ndp.h"
#include "../lib/ns_out.h"
#include "../lib/overlay.h"
#include "../lib/parse.h"
#include "../lib/policy.h"
#include "../lib/sever.h"
#include "../lib/stats.h"

/* Net 0: a pod in another node's fabric block goes over the overlay; the rest,
 * pods of this node included, to the host stack. Not straight to a local pod:
 * the packet may be the reply of a flow kube-proxy NATed here (a Service
 * backend answering its client), and only the host's conntrack can undo that.
 * For the same reason the reply of a flow the host DNATed into this pod goes
 * to the host even when its destination is on another node (lib/dnat.h).
 */
static __always_inline int from_pod_net0(struct __sk_buff *skb,
					 struct sdn_pkt *p,
					 __u32 port_flags)
{
	struct sdn_remote *r = sdn_net0_remote_lookup(&p->dst);
	int ret;

	if (sdn_dnat_reply(port_flags, p))
		return sdn_to_host(skb);
	if (!r) {
		/* Outside the cluster: masqueraded (lib/egress.h). */
		ret = sdn_masq_from_pod(skb, p);
		if (ret != SDN_SNAT_PASS)
			return ret < 0 ? sdn_drop(skb, ret) : ret;
		return sdn_to_host(skb);
	}
	ret = sdn_encap(skb, 0, r);
	return ret < 0 ? sdn_drop(skb, ret) : ret;
}

/*
 * A destination outside the pod's own net: allowed only into a peered net,
 * with the addresses unchanged. Across nodes the packet travels under the
 * source net's VNI, so the receiver decides again (sdn_from_overlay).
 */
static __always_inline int from_pod_peer(struct __sk_buff *skb,
					 struct sdn_pkt *p, __u32 net)
{
	struct sdn_endpoint *ep;
	struct sdn_remote *r;
	__u32 to = 0;
	int ret;

	ret = sdn_xnet_resolve(skb, net, &p->dst, &to);
	if (ret == DROP_VPC_ISOLATION) {
		/* In no net it may reach: out through a door (a Floating IP or
		 * a LoadBalancer reply first, then the gateway), or nowhere.
		 * SecurityGroups first, for what leaves by a door.
		 */
		ret = sdn_doors_police_out(skb, p, net);
		if (!ret)
			ret = sdn_doors_from_pod(skb, p, net);
		if (ret == SDN_FIP_XLAT)
			ret = sdn_doors_xlat_out(skb, p, net);
		if (!ret)
			ret = sdn_gw_from_pod(skb, p, net);
		return ret < 0 ? sdn_drop(skb, ret) : ret;
	}
	if (!ret)
		ret = sdn_lb_forward(skb, p, net, to);
	if (ret)
		return ret < 0 ? sdn_drop(skb, ret) : ret;
	ep = sdn_endpoint_lookup(to, &p->dst);
	r = ep ? NULL : sdn_remote_lookup(to, &p->dst);
	if (!ep && !r)
		return sdn_drop(skb, DROP_NO_ENDPOINT);
	ret = sdn_sg_police(skb, p, net, to, 0);
	if (ret)
		return sdn_drop(skb, ret);
	if (ep) {
		sdn_count_tx(skb, net);
		ret = sdn_deliver_local(skb, to, ep);
		return ret < 0 ? sdn_drop(skb, ret) : ret;
	}
	ret = sdn_encap(skb, net, r);
	if (ret >= 0 && sdn_sg_tag(skb, net, &p->src))
		ret = DROP_ENCAP;
	if (ret < 0)
		return sdn_drop(skb, ret);
	sdn_count_tx(skb, net);
	return ret;
}

/*
 * A VPC pod reaches its own net and the nets it is peered with, nothing else:
 * a destination that is neither an endpoint of the source's net nor allowed by
 * the cross-net maps (lib/crossnet.h) is dropped, whatever it is (the node,
 * net 0, an unpeered VPC, the Internet). The one exception is a reply through
 * the fabric bridge, recognised by its conntrack entry.
 */
static __always_inline int from_pod_vpc(struct __sk_buff *skb,
					struct sdn_pkt *p, __u32 net,
					__u32 port_flags)
{
	struct sdn_endpoint *ep;
	struct sdn_remote *r;
	struct sdn_addr gw;
	int ret;

	if (p->family == 6)
		sdn_gw6(&gw);
	else
		sdn_addr_from_v4(&gw, CONFIG(gw_ipv4));
	if (sdn_addr_eq(&p->dst, &gw)) {
		ret = sdn_bridge_reverse(skb, p, net);
		if (!ret)
			ret = sdn_bridge_police_out(skb, p, net);
		if (ret)
			return sdn_drop(skb, ret);
		return from_pod_net0(skb, p, port_flags);
	}
	ret = sdn_lb_from_pod(skb, p, net);
	if (ret)
		return sdn_drop(skb, ret);

	ep = sdn_endpoint_lookup(net, &p->dst);
	r = ep ? NULL : sdn_remote_lookup(net, &p->dst);
	if (!ep && !r)
		return from_pod_peer(skb, p, net);
	/* SecurityGroups: at the delivery of a pod of this node, and where a
	 * packet leaves for another node (whose delivery decides again), so
	 * that this node's table sees both directions of its pods' flows.
	 */
	ret = sdn_sg_police(skb, p, net, net, 0);
	if (ret)
		return sdn_drop(skb, ret);
	if (ep) {
		sdn_count_tx(skb, net);
		ret = sdn_deliver_local(skb, net, ep);
		return ret < 0 ? sdn_drop(skb, ret) : ret;
	}
	ret = sdn_encap(skb, net, r);
	if (ret >= 0 && sdn_sg_tag(skb, net, &p->src))
		ret = DROP_ENCAP;
	if (ret < 0)
		return sdn_drop(skb, ret);
	sdn_count_tx(skb, net);
	return ret;
}

/*
 * Attached at tc ingress (cls_bpf) of the host side of a pod's veth: it sees
 * every packet the pod sends. Answers ARP for the gateway, enforces the source
 * address and MAC of the port, applies VPC isolation, and forwards: a VPC pod
 * of this node straight into its netns (sdn_deliver_local), other nodes by
 * tunnel key + redirect to the overlay device, the rest of net 0 to the host
 * stack.
 * Returns TC_ACT_OK, TC_ACT_REDIRECT, or TC_ACT_SHOT via sdn_drop().
 */
SEC("classifier")
int sdn_from_pod(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct sdn_port *port;
	struct sdn_pkt p;
	__u32 net, flags;
	__u16 ep_flags = 0;
	int ret;

	port = bpf_map_lookup_elem(&sdn_ports, &ifindex);
	if (!port)
		return sdn_drop(skb, DROP_NO_PORT);
	net = port->net;
	flags = port->flags;

	ret = sdn_parse(skb, &p);
	if (ret)
		return sdn_drop(skb, ret);

	/* A migrated VM announcing itself: QEMU's RARP or a gratuitous ARP
	 * (lib/migrate.h); then handled as before (RARP is no IP: dropped).
	 */
	if (p.eth_proto == ETH_P_ARP || p.eth_proto == SDN_ETH_P_RARP)
		sdn_mig_announce(skb, &p);
	if (p.eth_proto == ETH_P_ARP) {
		ret = sdn_arp_gateway_reply(skb, &p);
		if (ret < 0)
			return sdn_drop(skb, ret);
		if (ret)
			return bpf_redirect(ifindex, 0);
		/* Net-0 pods may still rely on the host's proxy_arp. */
		return net ? sdn_drop(skb, DROP_ARP) : TC_ACT_OK;
	}
	if (!p.family)
		return net ? sdn_drop(skb, DROP_UNKNOWN_L3) : TC_ACT_OK;

	/* DHCPv4, DHCPv6 and router solicitations: the agent's, on this link
	 * only, before the source check a DISCOVER from 0.0.0.0 would fail
	 * (lib/autoconf.h).
	 */
	if (sdn_autoconf_from_pod(skb, &p))
		return TC_ACT_OK;

	/* The gateway's neighbour solicitation is answered here, like its ARP.
	 * Other NDP and MLD is link-scoped and sourced from the pod's fe80::
	 * address (or ::), which is no endpoint: it stays on the link, i.e. goes
	 * to the host end of the veth, which routes none of it further.
	 */
	if (sdn_is_ns(&p)) {
		ret = sdn_ndp_gateway_reply(skb, &p);
		if (ret < 0)
			return sdn_drop(skb, ret);
		if (ret)
			return bpf_redirect(ifindex, 0);
	}
	if (sdn_is_ndp(&p) || sdn_is_link_scoped6(&p)) {
		/* To the host end's link-local address: the node's own, so
		 * its HostFirewall's (neighbour discovery is exempt there).
		 */
		ret = sdn_hf_in(skb, &p);
		if (ret)
			return sdn_drop(skb, ret);
		return sdn_to_host(skb);
	}

	ret = sdn_check_source(skb, &p, net, &ep_flags);
	if (ret)
		return sdn_drop(skb, ret);

	if (!net) {
		/* A Service's frontend (lib/lb.h, the kube-proxy replacement):
		 * DNATed to its backend first, so that NetworkPolicy judges the
		 * backend, as it does behind kube-proxy.
		 */
		ret = sdn_lb_forward(skb, &p, 0, 0);
		if (ret == DROP_VIP_NO_BACKEND) {
			/* Refused at once, as kube-proxy does (lib/lb_reject.h). */
			int r = sdn_lb_reject(skb, &p);

			if (r > 0)
				return bpf_redirect(ifindex, 0);
			if (r < 0)
				ret = DROP_REWRITE;
		}
		if (ret)
			return sdn_drop(skb, ret);
		/* NetworkPolicy, the source's egress side (lib/policy.h); then,
		 * to the node's own addresses, the node's HostFirewall
		 * (lib/hostfw.h).
		 */
		ret = sdn_np_police(skb, &p);
		if (!ret)
			ret = sdn_hf_in(skb, &p);
		if (ret)
			return sdn_drop(skb, ret);
		/* A backend's reply to a client of this node: judged above as
		 * the backend's, then its source becomes the frontend again.
		 */
		ret = sdn_lb_reverse(skb, &p, 0);
		if (ret < 0)
			return sdn_drop(skb, ret);
		sdn_count_tx(skb, 0);
		/* A reply from a frontend to a client outside the cluster (it
		 * came in at the uplink): never masqueraded, and not handed to
		 * the host, which would drop a source that is its own address (a
		 * NodePort's) arriving from a pod as a martian: routed out by the
		 * node's FIB (lib/ns_out.h).
		 */
		if (ret && !sdn_is_internal(0, &p.dst)) {
			ret = sdn_ns_redirect_out(skb, &p);
			return ret < 0 ? sdn_drop(skb, ret) : ret;
		}
		return from_pod_net0(skb, &p, flags);
	}
	ret = sdn_sever_from_pod(&p, ep_flags);
	if (ret)
		return sdn_drop(skb, ret);
	ret = sdn_dns_steer(skb, &p, net);
	if (ret)
		return ret < 0 ? sdn_drop(skb, ret) : sdn_to_host(skb);
	return from_pod_vpc(skb, &p, net, flags);
}

/* Hand the packet to the pod of this veth, which must own the destination. */
static __always_inline int to_pod_deliver(struct __sk_buff *skb,
					  const struct sdn_pkt *p, __u32 net)
{
	struct sdn_endpoint *ep = sdn_endpoint_lookup(net, &p->dst);
	__u8 gw_mac[6];

	if (!ep || ep->ifindex != skb->ifindex)
		return sdn_drop(skb, DROP_NO_ENDPOINT);
	sdn_gw_mac(gw_mac);
	if (sdn_set_macs(skb, ep->mac, gw_mac) < 0)
		return sdn_drop(skb, DROP_REWRITE);
	sdn_count_rx(skb, net);
	return TC_ACT_OK;
}

/*
 * sdn_to_pod for a VPC port: host traffic enters only through the fabric
 * bridge. A subprogram because the bridge's keys and rewrites take about 330
 * bytes of stack, which must not sit under the NetworkPolicy check's frame on
 * the net-0 branch (lib/policy.h).
 */
static __sdn_noinline int to_pod_vpc(struct __sk_buff *skb,
				     struct sdn_port *port, struct sdn_pkt *p,
				     __u32 net)
{
	struct sdn_bridge *b;
	int ret;

	/* The host's own link-scoped IPv6 (its MLD reports on every veth, its
	 * neighbour discovery) is no way into the VPC: it cannot be routed on.
	 */
	if (sdn_is_ndp(p) || sdn_is_link_scoped6(p))
		return TC_ACT_OK;

	b = bpf_map_lookup_elem(&sdn_bridges, &p->dst);
	if (!b || b->net != net)
		return sdn_drop(skb, DROP_VPC_ISOLATION);
	ret = sdn_dns_restore(skb, p, b);
	if (ret)
		return ret < 0 ? sdn_drop(skb, ret) : to_pod_deliver(skb, p, net);
	/* SecurityGroups before anything notes the flow (lib/bridge_sg.h). */
	ret = sdn_bridge_police_in(skb, p, b);
	if (ret)
		return sdn_drop(skb, ret);
	/* Keyed by the fabric IP: the bridge's reverse rewrite restores it first. */
	sdn_dnat_note(skb, port, p);
	sdn_masq_note_inbound(port, p);
	ret = sdn_bridge_forward(skb, p, b);
	if (ret)
		return sdn_drop(skb, ret);
	return to_pod_deliver(skb, p, net);
}

/*
 * Attached at tc egress of the host side of a pod's veth: it sees every packet
 * about to enter the pod through the host end, i.e. routed by the host stack
 * (net 0, and the fabric bridge; VPC pod-to-pod traffic is delivered into the
 * pod's netns by sdn_deliver_local and never passes here). Host traffic may
 * only enter a VPC pod through the fabric bridge; net-0 traffic passes the
 * destination's NetworkPolicy. Returns TC_ACT_OK or TC_ACT_SHOT via sdn_drop().
 */
SEC("classifier")
int sdn_to_pod(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct sdn_port *port;
	struct sdn_pkt p;
	__u32 net;
	int ret;

	port = bpf_map_lookup_elem(&sdn_ports, &ifindex);
	if (!port)
		return sdn_drop(skb, DROP_NO_PORT);
	net = port->net;

	ret = sdn_parse(skb, &p);
	if (ret)
		return sdn_drop(skb, ret);
	/* Our own gateway ARP replies, and the host's ARP towards net-0 pods. */
	if (p.eth_proto == ETH_P_ARP)
		return TC_ACT_OK;
	if (!p.family)
		return net ? sdn_drop(skb, DROP_UNKNOWN_L3) : TC_ACT_OK;
	/* The agent's DHCP and router advertisements (lib/autoconf.h). */
	if (sdn_autoconf_to_pod(skb, &p, net))
		return TC_ACT_OK;
	if (net)
		return to_pod_vpc(skb, port, &p, net);

	/* NetworkPolicy at the delivery: every net-0 packet into a pod, from
	 * this node's pods too, is routed here by the host.
	 */
	ret = sdn_np_police(skb, &p);
	if (ret)
		return sdn_drop(skb, ret);
	/* The node's own flow (a kubelet probe): tracked for its replies'
	 * HostFirewall check in sdn_from_pod (lib/hostfw.h).
	 */
	ret = sdn_hf_to_pod(skb, &p);
	if (ret)
		return sdn_drop(skb, ret);
	sdn_dnat_note(skb, port, &p);
	sdn_masq_note_inbound(port, &p);
	sdn_count_rx(skb, 0);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
