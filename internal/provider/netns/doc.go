// Package netns is a provider whose machines are Linux network namespaces
// on this host, for tests, demos and CI of machines that join a head over
// the network: each machine is a namespace with its own veth address on a
// bridge the provider creates, and its worker runs inside it
// (`ip netns exec NS tide worker --bootstrap -`), so it reaches the head
// over a real non-loopback address, through TLS and tokens, exactly as a
// machine on another host does.
//
// It needs Linux, root and iproute2 (`ip`); New says so otherwise. The
// processes are managed by a local provider (package local) under the
// same root, which keeps the machine records, adopts live workers after a
// restart and kills every process of a machine on Delete and Shutdown;
// this package adds the network around them.
//
// Names encode ownership: every namespace and link carries the provider's
// prefix (by default "tn" and four hex digits derived from its root), so
// parallel providers never collide and a restarted provider finds what a
// killed one left: the namespaces of machines it still knows are adopted,
// every other namespace or link with its prefix is removed.
//
//	bridge          <prefix>br        gateway .1 of the subnet
//	host-side veth  <prefix>h<octet>  attached to the bridge
//	namespace       <prefix>-<id>     eth0 = <subnet>.<octet>/24
//
// Delete removes the machine's namespace and veth at once (its worker,
// cut off, is killed by the local provider); Shutdown removes every
// namespace, link and the bridge. A Configuring or Configured machine
// whose namespace disappeared shows as Failed.
package netns
