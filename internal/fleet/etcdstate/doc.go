// Package etcdstate is the fleet's shared state in etcd (BigFleet §6: the
// coordinator's state) and the transactions that keep it consistent: the
// fleet configuration (catalog, provider registry, shards and quota), shard
// ownership with its fencing epoch, machine → shard records, the permanent
// cluster → shard map, shard reports and coordinator directives. Every write
// of a shard controller is guarded by its ownership (epoch), every write of
// the coordinator by its leadership (term): a deposed writer changes nothing
// (ErrFenced). Records are JSON, readable with etcdctl. Store's doc lists
// the key layout.
//
// The coordinator (internal/fleet/coord) and the shard controllers
// (internal/fleet/shardctl) use it; neither talks to etcd otherwise.
package etcdstate
