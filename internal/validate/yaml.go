package validate

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	yaml "sigs.k8s.io/yaml/goyaml.v2"
)

// YAMLNumbers refuses the numbers of a YAML document that cannot be meant
// and that a conversion to JSON would lose or report without a field: .nan,
// .inf and -.inf. Errors name the field as a path (pools[0].offerings[1].price).
// A document that does not parse is left to the caller's parser.
func YAMLNumbers(data []byte) error {
	var doc any
	if yaml.Unmarshal(data, &doc) != nil {
		return nil
	}
	return walk("", doc)
}

func walk(path string, v any) error {
	switch v := v.(type) {
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%s: must be a finite number, got %s", orRoot(path), yamlFloat(v))
		}
	case map[any]any:
		keys := make([]string, 0, len(v))
		byKey := make(map[string]any, len(v))
		for k, e := range v {
			ks := fmt.Sprint(k)
			keys = append(keys, ks)
			byKey[ks] = e
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if err := walk(p, byKey[k]); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := walk(path+"["+strconv.Itoa(i)+"]", e); err != nil {
				return err
			}
		}
	}
	return nil
}

func orRoot(path string) string {
	if path == "" {
		return "(document)"
	}
	return path
}

func yamlFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return ".nan"
	case v > 0:
		return ".inf"
	}
	return "-.inf"
}
