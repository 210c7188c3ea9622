package httpapi

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// DefaultBodyTimeout is how long a request body may take to arrive when
// Options.BodyTimeout is zero.
const DefaultBodyTimeout = 30 * time.Second

// BodyTimeoutHandler applies the same body timeout as NewHandler to a
// handler mounted beside the API (the head wraps the dashboard's files and
// the API together); DefaultBodyTimeout when d is zero.
func BodyTimeoutHandler(h http.Handler, d time.Duration) http.Handler {
	if d <= 0 {
		d = DefaultBodyTimeout
	}
	return bodyDeadline(h, d)
}

// bodyDeadline bounds how long a request's body may take to arrive. A
// client trickling a body one byte at a time (slowloris) would otherwise
// hold a connection and a goroutine for as long as it likes: the head's
// server has only a header timeout, because an http.Server ReadTimeout
// would also cut the heartbeat and watch long-polls. The deadline is set
// on the connection before any handler (or auth check) runs and lifted as
// soon as the body has been read to its end, so a long-poll that follows
// is not cut; a handler that answers without reading the body (a 401)
// leaves it in place, and the server's discard of the unread body then
// times out and closes the connection.
func bodyDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			h.ServeHTTP(w, r) // not a real connection (a recorder)
			return
		}
		r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		h.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline once the body ends.
type deadlineBody struct {
	io.ReadCloser
	once sync.Once
	lift func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(b.lift)
	}
	return n, err
}
