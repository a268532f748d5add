package webhook

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/klog/v2"
)

// MaxBodyBytes is the largest AdmissionReview read: the API server's own
// limit on a request body (3 MiB), with room for the review around it.
const MaxBodyBytes = 4 << 20

// Handler serves c's reviews: POST an admission.k8s.io/v1 AdmissionReview
// as JSON, get one back. Bodies that are too large, not JSON or not a
// review get a 4xx status and no review: the API server then applies the
// webhook's failurePolicy.
func (c *Charger) Handler(logger klog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
			return
		}
		if t, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || t != "application/json" {
			http.Error(w, "Content-Type must be application/json", http.StatusUnsupportedMediaType)
			return
		}
		var review admissionv1.AdmissionReview
		err := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes)).Decode(&review)
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			http.Error(w, "AdmissionReview larger than 4 MiB", http.StatusRequestEntityTooLarge)
			return
		case err != nil && !errors.Is(err, io.EOF):
			http.Error(w, "not an AdmissionReview: "+err.Error(), http.StatusBadRequest)
			return
		case review.Request == nil:
			http.Error(w, "AdmissionReview without a request", http.StatusBadRequest)
			return
		}
		resp := c.Review(r.Context(), review.Request)
		if !resp.Allowed {
			logger.V(2).Info("Refused a pod", "namespace", review.Request.Namespace, "name", review.Request.Name,
				"user", review.Request.UserInfo.Username, "reason", resp.Result.Message)
		}
		review.Response, review.Request = resp, nil
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(&review); err != nil {
			logger.V(2).Info("Writing a review failed", "err", err)
		}
	})
}
