// Command rproxy is the baseline of proxycpu.sh: a plain
// httputil.ReverseProxy (Rewrite: SetURL and SetXForwarded) in front of
// -upstream, with the transport settings idem proxy uses for its own.
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to listen on")
	upstream := flag.String("upstream", "http://127.0.0.1:9000", "the service behind the proxy")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil {
		log.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	tr.IdleConnTimeout = 4 * time.Second
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.SetXForwarded()
		},
		Transport: tr,
	}
	srv := &http.Server{Addr: *listen, Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
