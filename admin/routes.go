package admin

// Routing and response helpers. Every answer the endpoint writes itself,
// errors included, is JSON except the dashboard, the HTML actor tree and
// /metrics; an error body is {"error": "...", "status": <code>}. Responses
// are never cached.

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/fibrilmq/fibril/access"
	"github.com/valyala/fasthttp"
)

// handler serves one method of one endpoint; queue is the {name} path
// parameter, empty for endpoints without one.
type handler func(ctx *fasthttp.RequestCtx, queue string)

// endpoint is one path's handlers by method, and what a user's
// credential must allow to reach them on a node with a users file
// (credentials.go; the zero need is node-wide). GET handlers also serve
// HEAD.
type endpoint struct {
	get, put, post handler
	needs          need
}

// allowed lists the methods the endpoint serves, for 405 answers.
func (e endpoint) allowed() []string {
	var methods []string
	if e.get != nil {
		methods = append(methods, fasthttp.MethodGet, fasthttp.MethodHead)
	}
	if e.put != nil {
		methods = append(methods, fasthttp.MethodPut)
	}
	if e.post != nil {
		methods = append(methods, fasthttp.MethodPost)
	}
	return methods
}

// serve is the fasthttp handler: route, check access, run the handler.
func (s *Server) serve(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	ctx.Response.Header.Set(fasthttp.HeaderXContentTypeOptions, "nosniff")
	path := string(ctx.Path())
	route, queue, found := s.resolve(path)
	method := string(ctx.Method())
	var serveMethod handler
	write := false
	switch method {
	case fasthttp.MethodGet, fasthttp.MethodHead:
		serveMethod = route.get
	case fasthttp.MethodPut:
		serveMethod, write = route.put, true
	case fasthttp.MethodPost:
		serveMethod, write = route.post, true
	default:
		write = true // unknown methods are treated as writes for access checks
	}
	if !s.maybeAdmit(ctx, write, route.needs) {
		return
	}
	if !found {
		writeError(ctx, fasthttp.StatusNotFound, "no endpoint at %s", clip(path))
		return
	}
	if serveMethod == nil {
		allowed := route.allowed()
		ctx.Response.Header.Set(fasthttp.HeaderAllow, strings.Join(allowed, ", "))
		writeError(ctx, fasthttp.StatusMethodNotAllowed, "method %s not allowed on %s; allowed: %s",
			clip(method), path, strings.Join(allowed, ", "))
		return
	}
	serveMethod(ctx, queue)
}

// resolve maps a request path to its endpoint and {name} parameter. A
// single trailing slash is ignored (except on "/").
func (s *Server) resolve(path string) (endpoint, string, bool) {
	if len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	switch path {
	case "/":
		return endpoint{get: s.handleDashboard}, "", true
	case "/cluster":
		return endpoint{get: s.handleClusterPage}, "", true
	case "/api/connections":
		return endpoint{get: s.handleConnections}, "", true
	case "/api/stats":
		return endpoint{get: s.handleStats}, "", true
	case "/debug/actors":
		return endpoint{get: s.handleActors}, "", true
	case "/api/node":
		return endpoint{get: s.handleNode}, "", true
	case "/api/queues":
		return endpoint{get: s.handleQueues}, "", true
	case "/api/settings/sync-interval":
		return endpoint{get: s.handleGetSyncInterval, put: s.handlePutSyncInterval}, "", true
	case "/api/cluster":
		return endpoint{get: s.handleCluster}, "", true
	case "/api/cluster/overview":
		return endpoint{get: s.handleClusterOverview}, "", true
	case "/healthz":
		return endpoint{get: s.handleHealth, needs: need{public: true}}, "", true
	case "/metrics":
		return endpoint{get: s.handleMetrics}, "", true
	}
	if file, ok := strings.CutPrefix(path, "/assets/"); ok {
		return endpoint{get: s.handleAsset, needs: need{public: true}}, file, true
	}
	if name, ok := strings.CutPrefix(path, "/queues/"); ok && name != "" && !strings.Contains(name, "/") {
		return endpoint{get: s.handleQueuePage, needs: visibleQueue(name)}, name, true
	}
	rest, ok := strings.CutPrefix(path, "/api/queues/")
	if !ok || rest == "" {
		return endpoint{}, "", false
	}
	name, action, hasAction := strings.Cut(rest, "/")
	admin := onQueue(name, access.Admin)
	switch {
	case !hasAction:
		return endpoint{get: s.handleQueue, needs: visibleQueue(name)}, name, true
	case action == "sync":
		return endpoint{post: s.handleQueueSync, needs: admin}, name, true
	case action == "reopen":
		return endpoint{post: s.handleQueueReopen, needs: admin}, name, true
	case action == "mode":
		return endpoint{post: s.handleQueueMode, needs: admin}, name, true
	case action == "purge":
		return endpoint{post: s.handleQueuePurge, needs: admin}, name, true
	case action == "delete":
		return endpoint{post: s.handleQueueDelete, needs: admin}, name, true
	case action == "peek":
		return endpoint{post: s.handleQueuePeek, needs: onQueue(name, access.Consume)}, name, true
	}
	return endpoint{}, "", false
}

// errorBody is the JSON body of every error answer.
type errorBody struct {
	Error  string `json:"error"`
	Status int    `json:"status"`
}

// writeJSON answers with value as indented JSON. value must encode: the
// endpoint's own view types always do, and a value that does not (from
// ClusterNode) is answered 500.
func writeJSON(ctx *fasthttp.RequestCtx, status int, value any) {
	body, err := json.MarshalIndent(value, "", "  ")
	if err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, "encoding the answer failed: %v", err)
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json; charset=utf-8")
	ctx.SetBody(append(body, '\n'))
}

// writeError answers with an error body.
func writeError(ctx *fasthttp.RequestCtx, status int, format string, args ...any) {
	body, err := json.MarshalIndent(errorBody{Error: fmt.Sprintf(format, args...), Status: status}, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("admin: encoding an error body: %v", err)) // strings and ints always encode
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json; charset=utf-8")
	ctx.SetBody(append(body, '\n'))
}

// sortQueues orders queue statuses by name.
func sortQueues(queues []QueueStatus) {
	sort.Slice(queues, func(i, j int) bool { return queues[i].Name < queues[j].Name })
}
