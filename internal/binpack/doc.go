// Package binpack estimates and builds multi-dimensional bin packings of
// pending work onto nodes: CPU, memory, GPUs and any extended resource are
// separate dimensions, and an item fits a node only if it fits in every one.
//
// Three functions cover the callers' needs:
//
//   - NodesFor is the exact node count for a group of identical items on one
//     node size (ECS cluster auto scaling computes exactly this per task group).
//   - LowerBound is a valid lower bound on the node count for several groups on
//     one node size: never above the optimum.
//   - Pack is a first-fit-decreasing packer over several offerings that first
//     fills free space on existing nodes and then opens new nodes, choosing
//     each new node's offering to aim at the cheapest mix by effective cost.
//
// The package is pure: no I/O, no clock, no randomness, no shared state. All
// functions are safe for concurrent use and never modify their arguments.
//
// Items are given as capacity.Pending groups (identical requests × count).
// A request with a negative amount in any dimension fits nowhere. Free space
// that is negative in a dimension (an overcommitted node) counts as zero.
package binpack
