#include "common/metrics/http_server.h"

#include <exception>
#include <sstream>

#include "CivetServer.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace tessera {

class MetricsHttpServer::Handler : public CivetHandler {
 public:
  using Body = std::function<void(int* status, std::string* content_type, std::string* body)>;
  explicit Handler(Body body) : body_(std::move(body)) {}

  bool handleGet(CivetServer*, mg_connection* conn) override {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
    body_(&status, &content_type, &body);
    mg_printf(conn,
              "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
              "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
              status, status == 200 ? "OK" : "Service Unavailable", content_type.c_str(), body.size());
    mg_write(conn, body.data(), body.size());
    return true;
  }

 private:
  Body body_;
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(MetricsHttpOptions options) {
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->options_ = std::move(options);
  const std::string address = absl::StrCat(s->options_.host, ":", s->options_.port);
  const std::vector<std::string> civet_options = {"listening_ports", address, "num_threads", "2"};
  try {
    s->server_ = std::make_unique<CivetServer>(civet_options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("metrics HTTP server cannot listen on ", address, ": ", e.what()));
  }
  const std::vector<int> ports = s->server_->getListeningPorts();
  if (ports.empty() || ports[0] <= 0) {
    return absl::UnavailableError(absl::StrCat("metrics HTTP server on ", address, " reports no listening port"));
  }
  s->port_ = ports[0];

  MetricsHttpServer* self = s.get();
  s->handlers_.push_back(std::make_unique<Handler>([self](int*, std::string* type, std::string* body) {
    std::vector<prometheus::MetricFamily> families;
    for (const auto& weak : self->options_.collectables) {
      if (auto c = weak.lock()) {
        auto more = c->Collect();
        families.insert(families.end(), std::make_move_iterator(more.begin()),
                        std::make_move_iterator(more.end()));
      }
    }
    *type = "text/plain; version=0.0.4; charset=utf-8";
    *body = prometheus::TextSerializer().Serialize(families);
  }));
  s->server_->addHandler("/metrics", s->handlers_.back().get());
  for (const auto& [path, check] : s->options_.checks) {
    auto fn = check;
    s->handlers_.push_back(std::make_unique<Handler>([fn](int* status, std::string*, std::string* body) {
      const HealthResult r = fn();
      *status = r.ok ? 200 : 503;
      *body = r.ok ? (r.detail.empty() ? "ok\n" : absl::StrCat("ok: ", r.detail, "\n"))
                   : absl::StrCat("not ok: ", r.detail, "\n");
    }));
    // civetweb matches handler URIs as prefixes unless they end in '$'.
    s->server_->addHandler(path + "$", s->handlers_.back().get());
  }
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  // Stop the server (joining its threads) before the handlers it calls go away.
  if (server_ != nullptr) server_->close();
  server_.reset();
}

}  // namespace tessera
