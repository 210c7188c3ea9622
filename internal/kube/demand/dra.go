package demand

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1beta1 "k8s.io/api/resource/v1beta1"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	"k8s.io/apimachinery/pkg/api/resource"
)

// DeviceClassPrefix starts the extended resource name by which a NodePool's
// offering says how many devices of a DeviceClass (dynamic resource
// allocation, resource.k8s.io) each of its nodes has:
// "deviceclass.tide.dev/<DeviceClass name>" in the offering's `extended`.
// A pod's DRA claims are counted as requests of these resources (see
// WithDevices); no Node advertises them (a DRA driver publishes its devices
// in ResourceSlices), so a Node counts with its offering's.
const DeviceClassPrefix = "deviceclass.tide.dev/"

// draWhy is the annotation WithDevices sets on the copy of a pod whose
// claims it cannot count: why (parseRules reports it as NotModelled).
const draWhy = "demand.tide.dev/dra-not-counted"

// Claims are the DRA objects of the cluster a pass reads.
type Claims struct {
	// Served is false when the claims could not be read (the cluster
	// serves no resource.k8s.io, or tide may not list them); Why then says
	// what was seen.
	Served bool
	Why    string
	// Version is the resource.k8s.io version they were read in (the
	// objects are converted to v1beta1's types).
	Version string
	// Claims are the ResourceClaims and Templates the ResourceClaimTemplates,
	// by namespace/name.
	Claims    map[string]*resourcev1beta1.ResourceClaim
	Templates map[string]*resourcev1beta1.ResourceClaimTemplate
}

// HasClaims reports whether any of pods has DRA resource claims (a pass
// reads the DRA objects only then).
func HasClaims(pods []*corev1.Pod) bool {
	for _, p := range pods {
		if len(p.Spec.ResourceClaims) > 0 {
			return true
		}
	}
	return false
}

// WithDevices returns pods with each pod that has DRA resource claims
// replaced by a copy whose claims are counted as requests of
// DeviceClassPrefix+<DeviceClass> (added to its first container's requests;
// the copy's claims are dropped), when tide can count them: every claim is
// made from a ResourceClaimTemplate or is a ResourceClaim of that pod alone,
// and every device request of it asks for an exact count of devices of a
// DeviceClass that an offering of one of pools declares, without CEL
// selectors, admin access, alternatives (firstAvailable) or constraints
// between devices. A pod bound to a Node counts what the scheduler
// allocated to its claims (any request, selectors included), each claim
// once. Any other pod is returned as a copy that says why its devices are
// not counted: it is counted by its other requests alone and reported as
// NotModelled.
func WithDevices(pods []*corev1.Pod, c Claims, pools []Pool) []*corev1.Pod {
	declared := map[string]bool{}
	for i := range pools {
		for j := range pools[i].Offerings {
			for k := range pools[i].Offerings[j].Resources.Extended {
				if name, ok := strings.CutPrefix(k, DeviceClassPrefix); ok {
					declared[name] = true
				}
			}
		}
	}
	// The pods using each named ResourceClaim.
	users := map[string]int{}
	for _, p := range pods {
		for _, rc := range p.Spec.ResourceClaims {
			if rc.ResourceClaimName != nil {
				users[p.Namespace+"/"+*rc.ResourceClaimName]++
			}
		}
	}
	counted := map[string]bool{} // claims whose devices a bound pod counts
	out := make([]*corev1.Pod, len(pods))
	for i, p := range pods {
		out[i] = p
		if len(p.Spec.ResourceClaims) == 0 {
			continue
		}
		var devs map[string]int64
		var why string
		switch {
		case !c.Served:
			why = c.Why
		case p.Spec.NodeName != "" || reservedFor(p, c):
			// Bound, or being bound: kube-scheduler allocated every
			// claim and reserved it for the pod, then binds it.
			devs, why = allocated(p, c, counted, declared)
		default:
			devs, why = requested(p, c, users, declared)
		}
		cp := p.DeepCopy()
		if why != "" {
			if cp.Annotations == nil {
				cp.Annotations = map[string]string{}
			}
			cp.Annotations[draWhy] = why
			out[i] = cp
			continue
		}
		cp.Spec.ResourceClaims = nil
		if len(cp.Spec.Containers) > 0 && len(devs) > 0 {
			r := &cp.Spec.Containers[0].Resources
			if r.Requests == nil {
				r.Requests = corev1.ResourceList{}
			}
			for class, n := range devs {
				name := corev1.ResourceName(DeviceClassPrefix + class)
				q := r.Requests[name]
				q.Add(*resource.NewQuantity(n, resource.DecimalSI))
				r.Requests[name] = q
			}
		}
		out[i] = cp
	}
	return out
}

// reservedFor says whether every claim of a pod not bound yet is
// allocated and reserved for it: kube-scheduler's binding cycle for the
// pod is under way (it allocates and reserves, then binds), so the pod is
// counted by what was allocated, as a bound one, rather than reported as
// holding claims allocated already.
func reservedFor(p *corev1.Pod, c Claims) bool {
	for i := range p.Spec.ResourceClaims {
		cl, _ := claimOf(p, &p.Spec.ResourceClaims[i], c)
		if cl == nil || cl.Status.Allocation == nil ||
			!slices.ContainsFunc(cl.Status.ReservedFor, func(r resourcev1beta1.ResourceClaimConsumerReference) bool { return r.UID == p.UID }) {
			return false
		}
	}
	return true
}

// claimOf returns the ResourceClaim of pod's claim entry i: named, or made
// from a template (pod.status.resourceClaimStatuses names it once made);
// nil when there is none yet, with the template, if any.
func claimOf(p *corev1.Pod, rc *corev1.PodResourceClaim, c Claims) (*resourcev1beta1.ResourceClaim, *resourcev1beta1.ResourceClaimTemplate) {
	if rc.ResourceClaimName != nil {
		return c.Claims[p.Namespace+"/"+*rc.ResourceClaimName], nil
	}
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.Name == rc.Name && st.ResourceClaimName != nil {
			if cl := c.Claims[p.Namespace+"/"+*st.ResourceClaimName]; cl != nil {
				return cl, nil
			}
		}
	}
	if rc.ResourceClaimTemplateName != nil {
		return nil, c.Templates[p.Namespace+"/"+*rc.ResourceClaimTemplateName]
	}
	return nil, nil
}

// allocated counts the devices of the declared DeviceClasses allocated to
// a bound pod's claims (each claim once over all pods).
func allocated(p *corev1.Pod, c Claims, counted, declared map[string]bool) (map[string]int64, string) {
	devs := map[string]int64{}
	for i := range p.Spec.ResourceClaims {
		cl, _ := claimOf(p, &p.Spec.ResourceClaims[i], c)
		if cl == nil || cl.Status.Allocation == nil {
			return nil, fmt.Sprintf("claim %q: no allocated ResourceClaim", p.Spec.ResourceClaims[i].Name)
		}
		key := cl.Namespace + "/" + cl.Name
		if counted[key] {
			continue
		}
		counted[key] = true
		class := map[string]string{}
		for _, r := range cl.Spec.Devices.Requests {
			class[r.Name] = r.DeviceClassName
			for _, s := range r.FirstAvailable {
				class[r.Name+"/"+s.Name] = s.DeviceClassName
			}
		}
		for _, res := range cl.Status.Allocation.Devices.Results {
			if name := class[res.Request]; declared[name] {
				devs[name]++
			}
		}
	}
	return devs, ""
}

// requested counts the devices by DeviceClass a waiting pod's claims ask
// for, or says why it cannot.
func requested(p *corev1.Pod, c Claims, users map[string]int, declared map[string]bool) (map[string]int64, string) {
	devs := map[string]int64{}
	for i := range p.Spec.ResourceClaims {
		rc := &p.Spec.ResourceClaims[i]
		cl, tmpl := claimOf(p, rc, c)
		var spec *resourcev1beta1.ResourceClaimSpec
		switch {
		case rc.ResourceClaimName != nil && users[p.Namespace+"/"+*rc.ResourceClaimName] > 1:
			return nil, fmt.Sprintf("claim %q: ResourceClaim %s is shared by several pods", rc.Name, *rc.ResourceClaimName)
		case cl != nil && cl.Status.Allocation != nil:
			return nil, fmt.Sprintf("claim %q: ResourceClaim %s is allocated already (the pod must go where its devices are)", rc.Name, cl.Name)
		case cl != nil:
			spec = &cl.Spec
		case tmpl != nil:
			spec = &tmpl.Spec.Spec
		default:
			return nil, fmt.Sprintf("claim %q: its ResourceClaim or ResourceClaimTemplate does not exist", rc.Name)
		}
		if len(spec.Devices.Constraints) > 0 {
			return nil, fmt.Sprintf("claim %q: constraints between devices", rc.Name)
		}
		for _, r := range spec.Devices.Requests {
			switch {
			case len(r.FirstAvailable) > 0:
				return nil, fmt.Sprintf("claim %q request %q: alternatives (firstAvailable)", rc.Name, r.Name)
			case len(r.Selectors) > 0:
				return nil, fmt.Sprintf("claim %q request %q: CEL selectors", rc.Name, r.Name)
			case r.AdminAccess != nil && *r.AdminAccess:
				return nil, fmt.Sprintf("claim %q request %q: admin access", rc.Name, r.Name)
			case r.AllocationMode != "" && r.AllocationMode != resourcev1beta1.DeviceAllocationModeExactCount:
				return nil, fmt.Sprintf("claim %q request %q: allocation mode %s (not an exact count)", rc.Name, r.Name, r.AllocationMode)
			case !declared[r.DeviceClassName]:
				return nil, fmt.Sprintf("claim %q request %q: no NodePool offering declares DeviceClass %q (extended %s%s)", rc.Name, r.Name,
					r.DeviceClassName, DeviceClassPrefix, r.DeviceClassName)
			}
			devs[r.DeviceClassName] += max(r.Count, 1)
		}
	}
	return devs, ""
}

// draReason is why a pod's DRA claims are not counted ("" when WithDevices
// did not look at it).
func draReason(p *corev1.Pod) string { return p.Annotations[draWhy] }

// ClaimV1beta2 converts a resource.k8s.io/v1beta2 ResourceClaim (the
// shape of resource.k8s.io/v1 as well) to v1beta1, the version WithDevices
// reads: what it looks at (requests, their class, mode, count, selectors,
// admin access and alternatives, constraints, allocation results) maps one
// to one.
func ClaimV1beta2(c *resourcev1beta2.ResourceClaim) *resourcev1beta1.ResourceClaim {
	out := &resourcev1beta1.ResourceClaim{ObjectMeta: c.ObjectMeta, Spec: specV1beta2(&c.Spec)}
	for _, r := range c.Status.ReservedFor {
		out.Status.ReservedFor = append(out.Status.ReservedFor,
			resourcev1beta1.ResourceClaimConsumerReference{APIGroup: r.APIGroup, Resource: r.Resource, Name: r.Name, UID: r.UID})
	}
	if a := c.Status.Allocation; a != nil {
		out.Status.Allocation = &resourcev1beta1.AllocationResult{}
		for _, r := range a.Devices.Results {
			out.Status.Allocation.Devices.Results = append(out.Status.Allocation.Devices.Results,
				resourcev1beta1.DeviceRequestAllocationResult{Request: r.Request, Driver: r.Driver, Pool: r.Pool, Device: r.Device})
		}
	}
	return out
}

// TemplateV1beta2 converts a v1beta2 (or v1) ResourceClaimTemplate to
// v1beta1 (see ClaimV1beta2).
func TemplateV1beta2(t *resourcev1beta2.ResourceClaimTemplate) *resourcev1beta1.ResourceClaimTemplate {
	return &resourcev1beta1.ResourceClaimTemplate{ObjectMeta: t.ObjectMeta,
		Spec: resourcev1beta1.ResourceClaimTemplateSpec{ObjectMeta: t.Spec.ObjectMeta, Spec: specV1beta2(&t.Spec.Spec)}}
}

func specV1beta2(s *resourcev1beta2.ResourceClaimSpec) resourcev1beta1.ResourceClaimSpec {
	sels := func(in []resourcev1beta2.DeviceSelector) []resourcev1beta1.DeviceSelector {
		var out []resourcev1beta1.DeviceSelector
		for _, s := range in {
			var cel *resourcev1beta1.CELDeviceSelector
			if s.CEL != nil {
				cel = &resourcev1beta1.CELDeviceSelector{Expression: s.CEL.Expression}
			}
			out = append(out, resourcev1beta1.DeviceSelector{CEL: cel})
		}
		return out
	}
	var out resourcev1beta1.ResourceClaimSpec
	for _, r := range s.Devices.Requests {
		req := resourcev1beta1.DeviceRequest{Name: r.Name}
		if e := r.Exactly; e != nil {
			req.DeviceClassName, req.Selectors, req.AllocationMode, req.Count, req.AdminAccess =
				e.DeviceClassName, sels(e.Selectors), resourcev1beta1.DeviceAllocationMode(e.AllocationMode), e.Count, e.AdminAccess
		}
		for _, sub := range r.FirstAvailable {
			req.FirstAvailable = append(req.FirstAvailable, resourcev1beta1.DeviceSubRequest{Name: sub.Name, DeviceClassName: sub.DeviceClassName,
				Selectors: sels(sub.Selectors), AllocationMode: resourcev1beta1.DeviceAllocationMode(sub.AllocationMode), Count: sub.Count})
		}
		out.Devices.Requests = append(out.Devices.Requests, req)
	}
	for _, c := range s.Devices.Constraints {
		out.Devices.Constraints = append(out.Devices.Constraints, resourcev1beta1.DeviceConstraint{Requests: c.Requests,
			MatchAttribute: (*resourcev1beta1.FullyQualifiedName)(c.MatchAttribute)})
	}
	return out
}
