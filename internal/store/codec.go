package store

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ts encodes a time as Unix nanoseconds; the zero time is NULL.
func ts(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func fromTS(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

func intPtr(n sql.NullInt64) *int {
	if !n.Valid {
		return nil
	}
	v := int(n.Int64)
	return &v
}

func nullInt(p *int) any {
	if p == nil {
		return nil
	}
	return int64(*p)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func encodeMap(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func decodeMap(s, field string) (map[string]string, error) {
	m := map[string]string{}
	if s == "" || s == "{}" {
		return m, nil
	}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", field, err)
	}
	return m, nil
}

func encodeInts(v []int) string {
	if len(v) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(v) // []int always marshals
	return string(b)
}

func decodeInts(s, field string) ([]int, error) {
	if s == "" || s == "[]" {
		return nil, nil
	}
	var v []int
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("decode %s: %w", field, err)
	}
	return v, nil
}

// parseIndexList parses a group_concat of integers ("3,1,2") into a sorted slice.
func parseIndexList(s sql.NullString) ([]int, error) {
	if !s.Valid || s.String == "" {
		return nil, nil
	}
	parts := strings.Split(s.String, ",")
	out := make([]int, 0, len(parts))
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("decode gpu index %q: %w", p, err)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// inList returns "?,?,?" for n placeholders.
func inList(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?,", n-1) + "?"
}
