package kubetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
)

// ResetTimeout bounds Reset: how long the objects a test made may take to
// be gone.
var ResetTimeout = 2 * time.Minute

// resourceType is one listable, deletable resource the apiserver serves.
type resourceType struct {
	group, version, resource string
	namespaced               bool
	// collection says the resource can be deleted a collection at a time.
	collection bool
}

func (r resourceType) String() string {
	if r.group == "" {
		return r.resource
	}
	return r.resource + "." + r.group
}

// path is the resource's collection path (namespace "" for all of them).
func (r resourceType) path(namespace string) string {
	p := "/apis/" + r.group + "/" + r.version
	if r.group == "" {
		p = "/api/" + r.version
	}
	if namespace != "" {
		p += "/namespaces/" + namespace
	}
	return p + "/" + r.resource
}

// object is one object of the cluster, by its metadata.
type object struct {
	typ         resourceType
	namespace   string
	name        string
	uid         string
	generation  int64
	deleting    bool
	finalizers  []string
	labels      map[string]string
	annotations map[string]string
}

func (o object) String() string {
	s := o.typ.String() + " "
	if o.namespace != "" {
		s += o.namespace + "/"
	}
	s += o.name
	if o.deleting {
		s += " (being deleted"
		if len(o.finalizers) > 0 {
			s += ", finalizers " + strings.Join(o.finalizers, ",")
		}
		s += ")"
	}
	return s
}

// baseObject is an object of the pristine state.
type baseObject struct {
	desc       string
	generation int64
}

// resources lists the resource types the apiserver serves that can be
// listed and deleted, through aggregated discovery (one request for the
// core group, one for the others): a resource served in several versions
// of its group is listed once, in the first (preferred) one.
func (c *Cluster) resources() ([]resourceType, error) {
	var out []resourceType
	for _, root := range []string{"/api", "/apis"} {
		code, body, err := c.Do(http.MethodGet, root, nil, "Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
		if err != nil {
			return nil, err
		}
		if code != http.StatusOK {
			return nil, fmt.Errorf("discovery %s: %d %s", root, code, tail(body, 300))
		}
		var list struct {
			Kind  string
			Items []struct {
				Metadata struct{ Name string }
				Versions []struct {
					Version   string
					Resources []struct {
						Resource string
						Scope    string
						Verbs    []string
					}
				}
			}
		}
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, fmt.Errorf("discovery %s: %w", root, err)
		}
		if list.Kind != "APIGroupDiscoveryList" {
			return nil, fmt.Errorf("discovery %s: the apiserver answered a %q, not an aggregated APIGroupDiscoveryList", root, list.Kind)
		}
		for _, g := range list.Items {
			seen := map[string]bool{}
			for _, v := range g.Versions {
				for _, r := range v.Resources {
					if seen[r.Resource] || !has(r.Verbs, "list") || !has(r.Verbs, "delete") {
						continue
					}
					seen[r.Resource] = true
					out = append(out, resourceType{group: g.Metadata.Name, version: v.Version, resource: r.Resource,
						namespaced: r.Scope == "Namespaced", collection: has(r.Verbs, "deletecollection")})
				}
			}
		}
	}
	return out, nil
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// objects lists every object of every resource type the apiserver serves
// (resources), by its metadata only, four lists at a time.
func (c *Cluster) objects() ([]object, error) {
	types, err := c.resources()
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		out  []object
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 4)
	)
	for _, typ := range types {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			objs, err := c.list(typ)
			mu.Lock()
			defer mu.Unlock()
			out = append(out, objs...)
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// list lists the objects of one type (every namespace), page by page.
func (c *Cluster) list(typ resourceType) ([]object, error) {
	var out []object
	cont := ""
	for {
		q := url.Values{"limit": {"500"}}
		if cont != "" {
			q.Set("continue", cont)
		}
		code, body, err := c.Do(http.MethodGet, typ.path("")+"?"+q.Encode(), nil,
			"Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json")
		if err != nil {
			return out, fmt.Errorf("list %s: %w", typ, err)
		}
		if code == http.StatusNotFound { // a CRD deleted since discovery
			return out, nil
		}
		if code != http.StatusOK {
			return out, fmt.Errorf("list %s: %d %s", typ, code, tail(body, 300))
		}
		var l struct {
			Metadata struct{ Continue string }
			Items    []struct {
				Metadata struct {
					Name, Namespace, UID string
					Generation           int64
					DeletionTimestamp    *string
					Finalizers           []string
					Labels, Annotations  map[string]string
				}
			}
		}
		if err := json.Unmarshal(body, &l); err != nil {
			return out, fmt.Errorf("list %s: %w", typ, err)
		}
		for _, it := range l.Items {
			m := it.Metadata
			out = append(out, object{typ: typ, namespace: m.Namespace, name: m.Name, uid: m.UID, generation: m.Generation,
				deleting: m.DeletionTimestamp != nil, finalizers: m.Finalizers, labels: m.Labels, annotations: m.Annotations})
		}
		if cont = l.Metadata.Continue; cont == "" {
			return out, nil
		}
	}
}

// snapshot records the cluster's objects as its pristine state.
func (c *Cluster) snapshot() error {
	objs, err := c.objects()
	if err != nil {
		return err
	}
	c.baseline, c.baseTypes, c.baseNamespaces = map[string]baseObject{}, map[string]bool{}, map[string]bool{"": true}
	for _, o := range objs {
		if o.typ.group == "" && o.typ.resource == "namespaces" {
			c.baseNamespaces[o.name] = true
		}
	}
	for _, o := range objs {
		c.baseTypes[o.typ.String()] = true
		if !isEvent(o.typ) && !c.systemMade(o) {
			c.baseline[o.uid] = baseObject{desc: o.String(), generation: o.generation}
		}
	}
	return nil
}

// systemMade says whether o is an object the control plane makes by itself
// in a namespace of the pristine state (the standard ones, and those the
// plane's Setup made), at a moment of its choosing (kube-controller-manager
// may make a namespace's default ServiceAccount after the pristine state was
// recorded): never deleted by Reset, never a leftover.
func (c *Cluster) systemMade(o object) bool {
	if !c.baseNamespaces[o.namespace] {
		return false
	}
	switch {
	case o.typ.group == "" && o.typ.resource == "serviceaccounts" && o.name == "default":
		return true
	case o.typ.group == "" && o.typ.resource == "configmaps" && o.name == "kube-root-ca.crt":
		return true
	case o.typ.group == "coordination.k8s.io" && o.typ.resource == "leases" && o.namespace == "kube-system" &&
		strings.HasPrefix(o.name, "apiserver-"):
		return true
	case o.typ.group == "apiregistration.k8s.io" && o.typ.resource == "apiservices" &&
		o.labels["kube-aggregator.kubernetes.io/automanaged"] != "":
		return true // follows the CRDs: goes with its CRD
	}
	return false
}

func isEvent(t resourceType) bool {
	return t.resource == "events" && (t.group == "" || t.group == "events.k8s.io")
}

// deleteRank orders a pass's deletions: admission webhooks and policies
// first (one may refuse the deletions), then the objects that make others
// (NodePools, workload controllers), the containers of others last (Nodes,
// namespaces, CRDs).
func deleteRank(o object) int {
	switch o.typ.resource {
	case "validatingwebhookconfigurations", "mutatingwebhookconfigurations", "validatingadmissionpolicies",
		"validatingadmissionpolicybindings", "mutatingadmissionpolicies", "mutatingadmissionpolicybindings":
		return -1
	case "nodepools", "provisioningrequests", "deployments", "replicasets", "statefulsets", "daemonsets", "jobs", "cronjobs",
		"replicationcontrollers":
		return 0
	case "nodes":
		return 2
	case "namespaces", "customresourcedefinitions":
		return 3
	}
	return 1
}

// Reset brings a shared plane back to its pristine state (the objects it
// had once its SharedPlane's Setup ran): every object made since, of every
// resource the apiserver serves (NodePools, Nodes, pods and their
// controllers, namespaces, leases, Secrets, RBAC, CRDs and their objects,
// webhooks, PriorityClasses, CSRs, DRA objects, events...), is deleted:
// pods at once (grace 0), finalizers removed (the operator that would
// remove them has stopped), a namespace finalized once its objects are
// gone. It waits until they are gone, at most ResetTimeout, and fails
// naming what is left; it fails too when an object of the pristine state
// was deleted or its spec changed (its generation), which it cannot undo.
// Objects the control plane makes by itself (a namespace's default
// ServiceAccount and kube-root-ca.crt, the apiserver's Lease) are left;
// events are deleted but may come late.
//
// Every process of the test that acts on the cluster (operators, kubelets,
// machines' agents) must be stopped first: Shared's cleanup runs after the
// test's own.
func (c *Cluster) Reset() error {
	if c.baseline == nil {
		return errors.New("kubetest: Reset needs a shared plane (Shared), whose pristine state was recorded")
	}
	deadline := time.Now().Add(ResetTimeout)
	stripped := map[string]bool{} // the finalizers removed, by uid
	var errs []string             // the last pass's failed requests
	for pass := 0; ; pass++ {
		objs, err := c.objects()
		if err != nil {
			return err
		}
		var left, changed []string
		present := map[string]bool{}
		var doomed []object
		nsContent := map[string]int{} // non-pristine objects per namespace
		for _, o := range objs {
			present[o.uid] = true
			if c.systemMade(o) {
				continue
			}
			if b, ok := c.baseline[o.uid]; ok {
				if o.generation != b.generation {
					changed = append(changed, fmt.Sprintf("%s (generation %d, was %d)", o, o.generation, b.generation))
				}
				continue
			}
			doomed = append(doomed, o)
			if !isEvent(o.typ) {
				left = append(left, o.String())
				if o.namespace != "" {
					nsContent[o.namespace]++
				}
			}
		}
		var missing []string
		for uid, b := range c.baseline {
			if !present[uid] {
				missing = append(missing, b.desc)
			}
		}
		if len(missing) > 0 || len(changed) > 0 {
			sort.Strings(missing)
			sort.Strings(changed)
			return fmt.Errorf("a test changed the pristine state, which Reset cannot restore: deleted %s; changed %s",
				cut(missing, 10), cut(changed, 10))
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			sort.Strings(left)
			err := fmt.Errorf("after %v, %d objects a test made are still there: %s", ResetTimeout, len(left), cut(left, 20))
			if len(errs) > 0 {
				err = fmt.Errorf("%w; the last pass's failed requests: %s", err, cut(errs, 5))
			}
			return err
		}
		sort.SliceStable(doomed, func(i, j int) bool { return deleteRank(doomed[i]) < deleteRank(doomed[j]) })
		errs = nil
		collections := map[string]bool{} // the collections deleted in this pass
		opts := map[string]any{"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background", "gracePeriodSeconds": 0}
		for _, o := range doomed {
			path := o.typ.path(o.namespace) + "/" + o.name
			switch {
			case o.typ.collection && (isEvent(o.typ) || !c.baseTypes[o.typ.String()]):
				// No object of its type is pristine (or they are
				// events): delete the namespace's (or the cluster's)
				// collection at once, not one object after the other.
				if key := o.typ.String() + "/" + o.namespace; !collections[key] {
					collections[key] = true
					code, body, err := c.Do(http.MethodDelete, o.typ.path(o.namespace), opts)
					if err != nil || code >= 300 && code != http.StatusNotFound {
						errs = append(errs, fmt.Sprintf("delete the %s of %q: %d %s %v", o.typ, o.namespace, code, tail(body, 200), err))
					}
				}
			case !o.deleting:
				code, body, err := c.Do(http.MethodDelete, path, opts)
				if err != nil || code >= 300 && code != http.StatusNotFound && code != http.StatusConflict {
					errs = append(errs, fmt.Sprintf("delete %s: %d %s %v", o, code, tail(body, 200), err))
				}
			}
			if len(o.finalizers) > 0 && !stripped[o.uid+strings.Join(o.finalizers, ",")] {
				// Once deleted, nothing of the test is left to remove them.
				stripped[o.uid+strings.Join(o.finalizers, ",")] = true
				code, body, err := c.Do(http.MethodPatch, path, []byte(`{"metadata":{"finalizers":null}}`),
					"Content-Type", "application/merge-patch+json")
				if err != nil || code >= 300 && code != http.StatusNotFound {
					errs = append(errs, fmt.Sprintf("remove the finalizers of %s: %d %s %v", o, code, tail(body, 200), err))
				}
			}
			if o.typ.group == "" && o.typ.resource == "namespaces" && o.deleting && nsContent[o.name] == 0 {
				// Its objects are gone: finalize it rather than wait for
				// the namespace controller (or for ever without one).
				code, body, err := c.Do(http.MethodPut, path+"/finalize", map[string]any{"apiVersion": "v1", "kind": "Namespace",
					"metadata": map[string]any{"name": o.name}, "spec": map[string]any{"finalizers": []string{}}})
				if err != nil || code >= 300 && code != http.StatusNotFound && code != http.StatusConflict {
					errs = append(errs, fmt.Sprintf("finalize namespace %s: %d %s %v", o.name, code, tail(body, 200), err))
				}
			}
		}
		time.Sleep(time.Duration(min(pass+1, 5)) * 50 * time.Millisecond)
	}
}

// cut joins up to n strings and says how many more there are.
func cut(s []string, n int) string {
	if len(s) == 0 {
		return "nothing"
	}
	if len(s) <= n {
		return strings.Join(s, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(s[:n], ", "), len(s)-n)
}
