package scheduler

import "slices"

// ixForest holds the index's keys in Place's order, one treap per
// (free GPUs, empty, direction) class ordered by free room, ordinal and
// id, each node carrying the largest free CPU and the largest free memory
// of its subtree. Best looks for the first worker of a class whose CPU
// and memory both fit; a subtree whose largest free CPU or largest free
// memory is too small cannot hold one and is skipped whole, so the search
// no longer steps over every worker whose free room is large enough but
// whose CPU or memory alone is too small.
type ixForest struct {
	nodes  []ixNode // nodes[0] is the empty tree: its maxima are below any request
	free   []int32  // recycled nodes
	levels []int64  // the GPU levels that hold a worker, ascending
	byGPU  map[int64]*ixLevel
	n      int
	seed   uint64
}

// ixLevel is one GPU level's classes.
type ixLevel struct {
	root  [2][scoreDirections]int32 // [empty][direction]
	count int
}

type ixNode struct {
	key            ixKey
	left, right    int32
	prio           uint32
	maxCPU, maxMem int64
}

const ixNone = -1 << 63

func newIxForest() ixForest {
	return ixForest{nodes: []ixNode{{maxCPU: ixNone, maxMem: ixNone}}, byGPU: map[int64]*ixLevel{}, seed: 0x9e3779b97f4a7c15}
}

// Len returns the number of keys held.
func (f *ixForest) Len() int { return f.n }

// inClass orders keys of one class: free room, ordinal, id.
func inClass(a, b *ixKey) bool {
	switch {
	case a.room != b.room:
		return a.room < b.room
	case a.ordinal != b.ordinal:
		return a.ordinal < b.ordinal
	}
	return a.id < b.id
}

func (f *ixForest) pull(t int32) {
	n := &f.nodes[t]
	l, r := &f.nodes[n.left], &f.nodes[n.right]
	n.maxCPU = max(n.key.cpu, l.maxCPU, r.maxCPU)
	n.maxMem = max(n.key.mem, l.maxMem, r.maxMem)
}

func (f *ixForest) prio() uint32 {
	// splitmix64: deterministic, so that runs are reproducible.
	f.seed += 0x9e3779b97f4a7c15
	z := f.seed
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return uint32(z ^ (z >> 31))
}

func (f *ixForest) root(k *ixKey, create bool) *int32 {
	lv := f.byGPU[k.gpus]
	if lv == nil {
		if !create {
			return nil
		}
		lv = &ixLevel{}
		f.byGPU[k.gpus] = lv
	}
	e := 0
	if k.empty {
		e = 1
	}
	return &lv.root[e][k.dir]
}

// Insert adds k (not present).
func (f *ixForest) ReplaceOrInsert(k ixKey) {
	var t int32
	if n := len(f.free); n > 0 {
		t = f.free[n-1]
		f.free = f.free[:n-1]
	} else {
		f.nodes = append(f.nodes, ixNode{})
		t = int32(len(f.nodes) - 1)
	}
	f.nodes[t] = ixNode{key: k, prio: f.prio(), maxCPU: k.cpu, maxMem: k.mem}
	r := f.root(&k, true)
	*r = f.insert(*r, t)
	lv := f.byGPU[k.gpus]
	if lv.count == 0 {
		i, _ := slices.BinarySearch(f.levels, k.gpus)
		f.levels = slices.Insert(f.levels, i, k.gpus)
	}
	lv.count++
	f.n++
}

func (f *ixForest) insert(root, t int32) int32 {
	if root == 0 {
		return t
	}
	if f.nodes[t].prio > f.nodes[root].prio {
		l, r := f.split(root, &f.nodes[t].key)
		f.nodes[t].left, f.nodes[t].right = l, r
		f.pull(t)
		return t
	}
	if inClass(&f.nodes[t].key, &f.nodes[root].key) {
		f.nodes[root].left = f.insert(f.nodes[root].left, t)
	} else {
		f.nodes[root].right = f.insert(f.nodes[root].right, t)
	}
	f.pull(root)
	return root
}

// split divides t into the keys before k and those at or after it.
func (f *ixForest) split(t int32, k *ixKey) (int32, int32) {
	if t == 0 {
		return 0, 0
	}
	if inClass(&f.nodes[t].key, k) {
		l, r := f.split(f.nodes[t].right, k)
		f.nodes[t].right = l
		f.pull(t)
		return t, r
	}
	l, r := f.split(f.nodes[t].left, k)
	f.nodes[t].left = r
	f.pull(t)
	return l, t
}

func (f *ixForest) merge(a, b int32) int32 {
	if a == 0 {
		return b
	}
	if b == 0 {
		return a
	}
	if f.nodes[a].prio > f.nodes[b].prio {
		f.nodes[a].right = f.merge(f.nodes[a].right, b)
		f.pull(a)
		return a
	}
	f.nodes[b].left = f.merge(a, f.nodes[b].left)
	f.pull(b)
	return b
}

// Delete removes k; no-op when absent.
func (f *ixForest) Delete(k ixKey) {
	r := f.root(&k, false)
	if r == nil {
		return
	}
	var gone int32
	*r = f.delete(*r, &k, &gone)
	if gone == 0 {
		return
	}
	f.free = append(f.free, gone)
	f.n--
	lv := f.byGPU[k.gpus]
	lv.count--
	if lv.count == 0 {
		i, _ := slices.BinarySearch(f.levels, k.gpus)
		f.levels = slices.Delete(f.levels, i, i+1)
	}
}

func (f *ixForest) delete(t int32, k *ixKey, gone *int32) int32 {
	if t == 0 {
		return 0
	}
	n := &f.nodes[t]
	switch {
	case inClass(k, &n.key):
		n.left = f.delete(n.left, k, gone)
	case inClass(&n.key, k):
		n.right = f.delete(n.right, k, gone)
	default:
		*gone = t
		return f.merge(n.left, n.right)
	}
	f.pull(t)
	return t
}

// first returns the first node of t, in class order, whose free CPU and
// memory are at least cpu and mem and that ok accepts (ok nil: any); 0
// when none.
func (f *ixForest) first(t int32, cpu, mem int64, ok func(*ixKey) bool) int32 {
	for t != 0 {
		n := &f.nodes[t]
		if n.maxCPU < cpu || n.maxMem < mem {
			return 0
		}
		if l := n.left; l != 0 && f.nodes[l].maxCPU >= cpu && f.nodes[l].maxMem >= mem {
			if got := f.first(l, cpu, mem, ok); got != 0 {
				return got
			}
		}
		if n.key.cpu >= cpu && n.key.mem >= mem && (ok == nil || ok(&n.key)) {
			return t
		}
		t = n.right
	}
	return 0
}

// Ascend calls fn with every key in Place's order until fn returns false.
func (f *ixForest) Ascend(fn func(ixKey) bool) {
	for _, g := range f.levels {
		lv := f.byGPU[g]
		for e := range lv.root {
			for d := range lv.root[e] {
				if !f.ascend(lv.root[e][d], fn) {
					return
				}
			}
		}
	}
}

func (f *ixForest) ascend(t int32, fn func(ixKey) bool) bool {
	for t != 0 {
		if !f.ascend(f.nodes[t].left, fn) || !fn(f.nodes[t].key) {
			return false
		}
		t = f.nodes[t].right
	}
	return true
}
