package agent

import (
	"net"
	"testing"
	"time"

	"github.com/tide-project/tide/internal/store"
)

// TestMovesToTheNextHead: a worker given two heads whose first does not
// answer (a closed port: a dead head) registers with the second and runs
// what it places.
func TestMovesToTheNextHead(t *testing.T) {
	th := newTestHead(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	cfg := workerConfig(t, th, "w1")
	cfg.HeadURL = dead + "," + th.srv.URL
	startWorker(t, cfg)
	id := th.submit(cmdReq("true"))
	th.waitStatus(id, store.StatusCompleted, 10*time.Second)
}

func TestHeadListParsed(t *testing.T) {
	cfg := Config{HeadURL: "http://a:1, b:2", DataDir: t.TempDir()}
	got, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.heads) != 2 || got.heads[0] != "http://a:1" || got.heads[1] != "http://b:2" || got.HeadURL != "http://a:1" {
		t.Fatalf("heads %v, HeadURL %q", got.heads, got.HeadURL)
	}
	if _, err := (Config{HeadURL: "http://a:1,ftp://b", DataDir: t.TempDir()}).withDefaults(); err == nil {
		t.Fatal("a bad second head was accepted")
	}
}
