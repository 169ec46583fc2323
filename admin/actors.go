package admin

// The actor tree. The node lists its live actors flat, each with a
// "/"-separated path; buildActorTree rebuilds the hierarchy by splitting the
// paths. A path segment that is not an actor itself (a queue name above its
// partitions) becomes a grouping node of kind "group" with no mailbox.
// Every request rebuilds the tree from the node's current list, so an actor
// started since the last request appears and a stopped one is gone.
//
// GET /debug/actors answers JSON ({"actor_count": N, "tree": [...]}) or,
// when the client prefers text/html (a browser) or asks ?format=html, a
// readable page; ?format=json forces JSON.

import (
	"bytes"
	"html/template"
	"sort"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
)

// groupKind is the kind of a tree node that is only a path segment.
const groupKind = "group"

// actorNode is one node of the actor tree as served.
type actorNode struct {
	Name          string       `json:"name"` // last path segment
	Path          string       `json:"path"`
	Kind          string       `json:"kind"` // "group" for a segment that is not an actor
	MailboxDepth  int          `json:"mailbox_depth"`
	Summary       string       `json:"summary"`
	Restarts      uint64       `json:"restarts"`
	StartedUnixMs int64        `json:"started_unix_ms,omitempty"`
	Children      []*actorNode `json:"children"` // sorted by name; empty, never null
}

// actorTreeView is the JSON body of GET /debug/actors.
type actorTreeView struct {
	ActorCount int          `json:"actor_count"`
	Tree       []*actorNode `json:"tree"`
}

// buildActorTree returns the roots of the tree of infos, each level sorted
// by name.
func buildActorTree(infos []ActorInfo) []*actorNode {
	top := &actorNode{Children: []*actorNode{}}
	byPath := map[string]*actorNode{}
	for _, info := range infos {
		parent := top
		segments := strings.Split(info.Path, "/")
		for depth, segment := range segments {
			path := strings.Join(segments[:depth+1], "/")
			node, ok := byPath[path]
			if !ok {
				node = &actorNode{Name: segment, Path: path, Kind: groupKind, Children: []*actorNode{}}
				byPath[path] = node
				parent.Children = append(parent.Children, node)
			}
			parent = node
		}
		parent.Kind = info.Kind
		parent.MailboxDepth = info.MailboxDepth
		parent.Summary = info.Summary
		parent.Restarts = info.Restarts
		if !info.StartedAt.IsZero() {
			parent.StartedUnixMs = info.StartedAt.UnixMilli()
		}
	}
	sortActorTree(top)
	return top.Children
}

func sortActorTree(node *actorNode) {
	sort.Slice(node.Children, func(i, j int) bool { return lessSegment(node.Children[i].Name, node.Children[j].Name) })
	for _, child := range node.Children {
		sortActorTree(child)
	}
}

// lessSegment orders numeric segments (partitions) by value and the rest
// by text, numbers first.
func lessSegment(a, b string) bool {
	numberA, errA := strconv.ParseUint(a, 10, 64)
	numberB, errB := strconv.ParseUint(b, 10, 64)
	switch {
	case errA == nil && errB == nil:
		return numberA < numberB
	case errA == nil || errB == nil:
		return errA == nil
	}
	return a < b
}

func (s *Server) handleActors(ctx *fasthttp.RequestCtx, _ string) {
	html, ok := wantsHTMLOrFormat(ctx)
	if !ok {
		writeError(ctx, fasthttp.StatusBadRequest, "unknown format %q; use json or html",
			clip(string(ctx.QueryArgs().Peek("format"))))
		return
	}
	infos := s.node.Actors()
	tree := buildActorTree(infos)
	if !html {
		writeJSON(ctx, fasthttp.StatusOK, actorTreeView{ActorCount: len(infos), Tree: tree})
		return
	}
	var page bytes.Buffer
	if err := actorPage.Execute(&page, actorTreeView{ActorCount: len(infos), Tree: tree}); err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, "rendering the actor tree failed: %v", err)
		return
	}
	writeHTML(ctx, page.Bytes())
}

// wantsHTMLOrFormat decides between HTML and JSON: ?format= wins, then the
// Accept header. ok is false for an unknown format.
func wantsHTMLOrFormat(ctx *fasthttp.RequestCtx) (html bool, ok bool) {
	switch format := string(ctx.QueryArgs().Peek("format")); format {
	case "":
		return wantsHTML(ctx), true
	case "html":
		return true, true
	case "json":
		return false, true
	}
	return false, false
}

// wantsHTML reports whether the request's Accept header prefers text/html.
func wantsHTML(ctx *fasthttp.RequestCtx) bool {
	return prefersHTML(string(ctx.Request.Header.Peek(fasthttp.HeaderAccept)))
}

// prefersHTML reports whether an Accept header value names text/html (or
// text/*) with a quality at least that of JSON (application/json,
// application/* or */*). A browser's "text/html,...,*/*;q=0.8" prefers HTML;
// "*/*" alone, as command-line tools send, does not.
func prefersHTML(accept string) bool {
	qualityHTML, qualityJSON := 0.0, 0.0
	for _, mediaRange := range strings.Split(accept, ",") {
		mediaType, parameters, _ := strings.Cut(mediaRange, ";")
		quality := 1.0
		for _, parameter := range strings.Split(parameters, ";") {
			key, value, _ := strings.Cut(strings.TrimSpace(parameter), "=")
			if strings.EqualFold(key, "q") {
				if parsed, err := strconv.ParseFloat(value, 64); err == nil {
					quality = parsed
				}
			}
		}
		switch strings.ToLower(strings.TrimSpace(mediaType)) {
		case "text/html", "text/*":
			qualityHTML = max(qualityHTML, quality)
		case "application/json", "application/*", "*/*":
			qualityJSON = max(qualityJSON, quality)
		}
	}
	return qualityHTML > 0 && qualityHTML >= qualityJSON
}

// actorPage renders the tree as nested lists. html/template escapes every
// value, so summaries and names cannot inject markup.
var actorPage = template.Must(template.New("actors").Parse(strings.Replace(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Fibril actors</title>
<style>@@STYLE@@</style>
</head>
<body>
<header><h1>Actors</h1><nav><a href="/">dashboard</a> · <a href="/debug/actors?format=json">JSON</a></nav></header>
<p class="muted">{{.ActorCount}} live actors. Reload the page to see the tree now.</p>
<ul class="tree">{{range .Tree}}{{template "node" .}}{{end}}</ul>
</body>
</html>
{{define "node"}}<li><span class="name">{{.Name}}</span> <span class="kind">{{.Kind}}</span>
{{- if ne .Kind "group"}} <span class="depth">mailbox {{.MailboxDepth}}</span>
{{- if .Restarts}} <span class="restarts">restarts {{.Restarts}}</span>{{end}}
{{- if .Summary}} <span class="summary">{{.Summary}}</span>{{end}}{{end}}
{{- if .Children}}<ul>{{range .Children}}{{template "node" .}}{{end}}</ul>{{end}}</li>
{{end}}`, "@@STYLE@@", pageStyle, 1)))
