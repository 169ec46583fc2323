package admin

// The dashboard's static files, embedded in the binary: its script and
// stylesheet, and uPlot (https://github.com/leeoniya/uPlot, v1.6.32, MIT
// licensed; the license is served next to it as /assets/LICENSE-uPlot).

import (
	"embed"
	"path"

	"github.com/valyala/fasthttp"
)

//go:embed assets/dashboard.js assets/dashboard.css assets/uplot.iife.min.js assets/uplot.min.css assets/LICENSE-uPlot
var assets embed.FS

var assetTypes = map[string]string{
	".js":  "text/javascript; charset=utf-8",
	".css": "text/css; charset=utf-8",
	"":     "text/plain; charset=utf-8",
}

func (s *Server) handleAsset(ctx *fasthttp.RequestCtx, file string) {
	body, err := assets.ReadFile("assets/" + file)
	if err != nil || path.Base(file) != file {
		writeError(ctx, fasthttp.StatusNotFound, "no asset %q", clip(file))
		return
	}
	ctx.Response.Header.Set("Content-Security-Policy", contentSecurityPolicy)
	ctx.SetContentType(assetTypes[path.Ext(file)])
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetBody(body)
}
