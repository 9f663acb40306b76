/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Revocation: a pod whose Port is being deleted (its VPCBinding went, or an
 * operator deleted the Port) is severed by its node's agent, which sets
 * SDN_EP_F_SEVERED on the pod's endpoint record {net, vpc ip}. From then on
 * nothing from or to that VPC address passes: not to a pod of the same VPC or of
 * a peered one, on this node or another (remote senders still encapsulate to
 * this node while their Port entry lives, and the packet is dropped here, in
 * sdn_from_overlay's delivery). The fabric bridge is not VPC traffic: the node
 * reaching the pod's fabric address (kubelet probes, exec paths through the
 * node) and the pod's replies to it keep working.
 *
 * A flag on the endpoint record rather than a map of its own: both directions
 * already hold that record when they decide (the source check of sdn_from_pod,
 * the delivery lookup of sdn_deliver_local), so severing costs no lookup on
 * any packet, and the record and its flag go together when the pod goes.
 */
#pragma once

#include "common.h"
#include "parse.h"

static __always_inline int sdn_severed(__u16 ep_flags)
{
	return ep_flags & SDN_EP_F_SEVERED;
}

/* sdn_from_pod, for a VPC pod whose source record carries ep_flags: 0 when the
 * packet may go on, DROP_SEVERED when the pod is severed and the packet is not
 * a reply through the fabric bridge (addressed to the link-local gateway, which
 * the bridge then checks against its conntrack entry).
 */
static __always_inline int sdn_sever_from_pod(const struct sdn_pkt *p,
					      __u16 ep_flags)
{
	struct sdn_addr gw;

	if (likely(!sdn_severed(ep_flags)))
		return 0;
	sdn_addr_from_v4(&gw, CONFIG(gw_ipv4));
	return sdn_addr_eq(&p->dst, &gw) ? 0 : DROP_SEVERED;
}

/* Delivery of VPC traffic to a pod of this node (sdn_deliver_local): 0, or
 * DROP_SEVERED when the destination pod is severed.
 */
static __always_inline int sdn_sever_to_pod(const struct sdn_endpoint *ep)
{
	return sdn_severed(ep->flags) ? DROP_SEVERED : 0;
}
