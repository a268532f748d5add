package extender

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Serve runs the servers, over TLS those with a TLSConfig (which holds
// the certificate), until ctx ends or one fails, then shuts all down.
func Serve(ctx context.Context, servers []*http.Server) error {
	errc := make(chan error, len(servers))
	for _, hs := range servers {
		go func() {
			if hs.TLSConfig != nil {
				errc <- hs.ListenAndServeTLS("", "")
				return
			}
			errc <- hs.ListenAndServe()
		}()
	}
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, hs := range servers {
		if e := hs.Shutdown(shutdown); e != nil && !errors.Is(e, http.ErrServerClosed) {
			err = errors.Join(err, e)
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
