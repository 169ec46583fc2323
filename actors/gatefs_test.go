package actors

import (
	"path"
	"sync"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// gateFS wraps a filesystem so a test can hold the writes or the syncs of
// one node's queue logs (files named *.log): a held call waits until the
// gate opens again, as on a disk that stopped answering. Only the log's
// own goroutines block; everything else of the node runs on.
type gateFS struct {
	vfs.FS
	mu      sync.Mutex
	holding gateOps
	opened  chan struct{} // closed when the gate opens; replaced when it holds
	waiting int           // calls held now
}

type gateOps uint8

const (
	gateWrites gateOps = 1 << iota
	gateSyncs
)

func newGateFS(fs vfs.FS) *gateFS {
	opened := make(chan struct{})
	close(opened)
	return &gateFS{FS: fs, opened: opened}
}

// hold makes the next calls of ops on log files wait.
func (g *gateFS) hold(ops gateOps) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holding == 0 {
		g.opened = make(chan struct{})
	}
	g.holding = ops
}

// release lets every held call go on.
func (g *gateFS) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holding != 0 {
		g.holding = 0
		close(g.opened)
	}
}

// held reports how many calls wait at the gate now.
func (g *gateFS) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

func (g *gateFS) pass(op gateOps, name string) {
	if path.Ext(name) != ".log" {
		return
	}
	g.mu.Lock()
	if g.holding&op == 0 {
		g.mu.Unlock()
		return
	}
	g.waiting++
	opened := g.opened
	g.mu.Unlock()
	<-opened
	g.mu.Lock()
	g.waiting--
	g.mu.Unlock()
}

func (g *gateFS) wrap(file vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &gateFile{File: file, gate: g}, nil
}

func (g *gateFS) Create(name string) (vfs.File, error) { return g.wrap(g.FS.Create(name)) }
func (g *gateFS) OpenReadWrite(name string) (vfs.File, error) {
	return g.wrap(g.FS.OpenReadWrite(name))
}

type gateFile struct {
	vfs.File
	gate *gateFS
}

func (f *gateFile) Write(p []byte) (int, error) {
	f.gate.pass(gateWrites, f.Name())
	return f.File.Write(p)
}

func (f *gateFile) WriteAt(p []byte, off int64) (int, error) {
	f.gate.pass(gateWrites, f.Name())
	return f.File.WriteAt(p, off)
}

func (f *gateFile) Sync() error {
	f.gate.pass(gateSyncs, f.Name())
	return f.File.Sync()
}
