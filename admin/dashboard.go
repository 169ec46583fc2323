package admin

// What the HTML pages share: the actor page's stylesheet, the
// Content-Security-Policy and writeHTML. The dashboard's pages are in
// pages.go, their script and styles in assets/. There is no build step and
// no external asset: the policy allows scripts and styles only from this
// origin (and the actor page's inline style by its SHA-256).

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"

	"github.com/valyala/fasthttp"
)

// pageStyle is the stylesheet of every HTML page.
const pageStyle = `
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fff; }
header { display: flex; gap: 1.5em; align-items: baseline; flex-wrap: wrap; }
h1 { font-size: 1.4em; margin: 0; } h2 { font-size: 1.1em; margin: 1.5em 0 .5em; }
a { color: #0645ad; }
table { border-collapse: collapse; }
th, td { padding: .25em .6em; border-bottom: 1px solid #ddd; text-align: right; white-space: nowrap; }
th:first-child, td:first-child, td.text { text-align: left; }
th { background: #f4f4f4; font-weight: 600; }
.ok { color: #176117; font-weight: 600; } .bad { color: #a31515; font-weight: 600; }
.muted { color: #666; } .banner { background: #fde8e8; padding: .5em 1em; margin: 1em 0; }
pre { background: #f7f7f7; padding: .8em; overflow: auto; }
ul.tree, ul.tree ul { list-style: none; padding-left: 1.4em; border-left: 1px dotted #bbb; }
ul.tree { padding-left: 0; border: 0; }
.name { font-weight: 600; } .kind { color: #555; font-style: italic; }
.depth, .restarts { color: #0645ad; } .restarts { color: #a31515; } .summary { color: #333; }
`

// contentSecurityPolicy allows scripts and styles from this origin (the
// embedded assets) and the actor page's inline style, requests to this
// origin, and nothing else.
var contentSecurityPolicy = strings.Join([]string{
	"default-src 'none'",
	"script-src 'self'",
	"style-src 'self' '" + sourceHash(pageStyle) + "'",
	"connect-src 'self'",
	"img-src 'self'",
	"base-uri 'none'",
	"form-action 'none'",
	"frame-ancestors 'none'",
}, "; ")

// sourceHash is the CSP hash source of an inline element's text.
func sourceHash(text string) string {
	sum := sha256.Sum256([]byte(text))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// writeHTML answers 200 with an HTML page under the endpoint's policy.
func writeHTML(ctx *fasthttp.RequestCtx, page []byte) {
	ctx.Response.Header.Set("Content-Security-Policy", contentSecurityPolicy)
	ctx.Response.Header.Set("Referrer-Policy", "no-referrer")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.SetBody(page)
}
