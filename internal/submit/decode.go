package submit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// StatusUnprocessable is the status of a ValidationError (FastAPI's 422).
const StatusUnprocessable = 422

// ValidationItem is one entry of a 422 detail list (FastAPI's shape).
type ValidationItem struct {
	Loc  []any  `json:"loc"`
	Msg  string `json:"msg"`
	Type string `json:"type"`
}

// ValidationError is FastAPI's 422 answer: what is wrong, and the body as
// received (a JSON string when the body is not valid JSON). The API writes
// it as the response body.
type ValidationError struct {
	Detail []ValidationItem `json:"detail"`
	Body   json.RawMessage  `json:"body"`
}

func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Detail))
	for i, d := range e.Detail {
		msgs[i] = d.Msg
	}
	return fmt.Sprintf("%d: %s", StatusUnprocessable, strings.Join(msgs, "; "))
}

// Unmarshal decodes a request body, all of it, into v as the API does:
// exactly one JSON value, not null. It returns nil or the 422 answer: a
// json_invalid item for malformed JSON, a type_error item located at the
// field for a value of the wrong type.
func Unmarshal(body []byte, v any) *ValidationError {
	dec := json.NewDecoder(bytes.NewReader(body))
	err := dec.Decode(v)
	// Only JSON white space may follow the value. (Decoder.More is not
	// this test: it reports false before a '}' or ']', and accepted
	// `{"command":"x"}}`.)
	if err == nil && len(bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n")) > 0 {
		err = errors.New("trailing data after the JSON value")
	}
	if err == nil && bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
		err = errors.New("body must be a JSON object")
	}
	if err == nil {
		return nil
	}
	item := ValidationItem{Loc: []any{"body"}, Msg: "JSON decode error: " + err.Error(), Type: "json_invalid"}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		item = ValidationItem{Loc: []any{"body"}, Msg: fmt.Sprintf("Input should be a valid %s", te.Type), Type: "type_error"}
		for _, f := range strings.Split(te.Field, ".") {
			if f != "" {
				item.Loc = append(item.Loc, f)
			}
		}
	}
	raw := json.RawMessage(body)
	if !json.Valid(body) {
		raw, _ = json.Marshal(string(body))
	}
	return &ValidationError{Detail: []ValidationItem{item}, Body: raw}
}

// MissingField is the 422 answer for a required field the body left out;
// body is the decoded request, echoed back.
func MissingField(field string, body any) *ValidationError {
	raw, _ := json.Marshal(body)
	return &ValidationError{Detail: []ValidationItem{{Loc: []any{"body", field}, Msg: "Field required", Type: "missing"}}, Body: raw}
}

// Decode decodes a submit body. It fails with a *ValidationError (422)
// for a body Unmarshal refuses or one without a command.
func Decode(body []byte) (*Request, error) {
	var req Request
	if err := Unmarshal(body, &req); err != nil {
		return nil, err
	}
	if req.Command == nil {
		return nil, MissingField("command", req)
	}
	return &req, nil
}

// Parse is Decode then Check: the answer the API gives a submit body
// before the head looks at its state. The error is a *ValidationError
// (422) or an *Error (400).
func Parse(body []byte) (*Spec, error) {
	req, err := Decode(body)
	if err != nil {
		return nil, err
	}
	return Check(req)
}
