package scheduler

import (
	"math"

	"github.com/tide-project/tide/internal/capacity"
)

// The placement score looks at CPU and memory together. A worker's free
// CPU and memory form a vector; so does a request. Work that strands one
// dimension (memory-heavy tasks that leave CPU idle, CPU-heavy ones that
// leave memory idle) is placed where the free vector points the way the
// request does: a memory-heavy request goes where memory is what is left,
// beside CPU-heavy work, and the other way round, so that what one kind of
// work leaves the other uses. Among the workers whose free vector points
// the same way, the one with the least free room wins (best fit), and a
// worker that runs nothing is used only when no busy worker fits, so empty
// nodes stay empty for the autoscaler to release.
//
// Directions are counted in sectors of the CPU–memory quarter plane
// (scoreDirections of them), not as exact angles, so that an index can
// keep the workers of one sector ordered by free room and find the best
// one without a pass over every worker (Index). Measured on
// google2011_jobs.csv under the tide policy (docs/benchmarks.md): 8
// sectors strand about 2 % fewer node-hours than ranking by free CPU then
// memory; 4, 12 and 32 sectors, the exact cosine of the angle, and best
// fit on the request's dominant dimension or on the sum of both were
// measured too and did no better.

// scoreDirections is the number of sectors a free vector's direction falls
// in.
const scoreDirections = 8

// memPerMilli weighs memory against CPU in directions and free room: 4 GiB
// per vCPU (bytes per millicore), the ratio of the clouds' general-purpose
// offerings. A fixed weight, not each worker's own capacity, so that a
// request points the same way on every worker and an index can rank
// workers of different sizes alike.
const memPerMilli = (4 << 30) / 1000

// sectorBounds[i] is the slope (memory per millicore, weighted) between
// sector i and sector i+1.
var sectorBounds = func() (b [scoreDirections - 1]float64) {
	for i := range b {
		b[i] = math.Tan(float64(i+1) * math.Pi / 2 / scoreDirections)
	}
	return b
}()

// direction returns the sector of the CPU–memory vector (milliCPU,
// memory): 0 for CPU only (or nothing), scoreDirections-1 for memory only.
func direction(milliCPU, memory int64) int8 {
	c := float64(max(milliCPU, 0))
	m := float64(max(memory, 0)) / memPerMilli
	d := int8(0)
	for int(d) < len(sectorBounds) && m > sectorBounds[d]*c {
		d++
	}
	return d
}

// room is a worker's free CPU and memory as one weighted amount
// (millicores, with memPerMilli bytes counting as one): what best fit
// minimises among workers whose free vector points the same way.
func room(r capacity.Resources) int64 {
	return max(r.MilliCPU, 0) + max(r.Memory, 0)/memPerMilli
}

// directionRanks returns, for each sector, its rank for a request of req
// (0 best): sectors nearer the request's own direction first, the lower
// sector first between two equally near. A request of neither CPU nor
// memory ranks sectors in their order.
func directionRanks(req capacity.Resources) (rank [scoreDirections]int8) {
	if req.MilliCPU <= 0 && req.Memory <= 0 {
		for i := range rank {
			rank[i] = int8(i)
		}
		return rank
	}
	d := direction(req.MilliCPU, req.Memory)
	order := directionOrder(d)
	for i, s := range order {
		rank[s] = int8(i)
	}
	return rank
}

// directionOrder lists the sectors by rank for a request in sector d.
func directionOrder(d int8) (order [scoreDirections]int8) {
	n := 0
	order[n] = d
	n++
	for k := int8(1); n < scoreDirections; k++ {
		if d-k >= 0 {
			order[n] = d - k
			n++
		}
		if int(d+k) < scoreDirections {
			order[n] = d + k
			n++
		}
	}
	return order
}
