#include "protocol/messages.h"

namespace shoal::protocol {
namespace {

StatusOr<Body> DecodeBody(const wire::Envelope* env) {
  switch (env->message_type()) {
    case MessageKind::Hello: {
      const wire::Hello* h = env->message_as_Hello();
      SHOAL_RETURN_IF_ERROR(CheckString(h->client_name(), "client_name", false));
      SHOAL_RETURN_IF_ERROR(CheckString(h->trainer(), "trainer", false));
      Hello out{StringOrEmpty(h->client_name()), h->num_examples(), StringOrEmpty(h->trainer()), {}};
      if (h->codecs())
        for (const auto* s : *h->codecs())
          if (s && s->size() <= 64) out.codecs.push_back(s->str());
      return Body(std::move(out));
    }
    case MessageKind::Welcome: {
      SHOAL_ASSIGN_OR_RETURN(WelcomeInfo w, DecodeWelcome(env->message_as_Welcome()));
      return Body(std::move(w));
    }
    case MessageKind::RoundTask: {
      const wire::RoundTask* t = env->message_as_RoundTask();
      SHOAL_RETURN_IF_ERROR(CheckString(t->model_hash(), "model_hash", false));
      SHOAL_RETURN_IF_ERROR(CheckString(t->base_hash(), "base_hash", false));
      RoundTask out;
      auto config = DecodeRoundConfig(t->config(), env->round());
      if (config.ok()) out.config = *config;
      else out.config_error = config.status().message();
      out.deadline_ms = t->deadline_ms();
      out.model_hash = StringOrEmpty(t->model_hash());
      out.encoding = t->encoding();
      out.chunk = ViewChunk(t->payload());
      out.base_hash = StringOrEmpty(t->base_hash());
      out.delta_round = t->delta_round();
      return Body(std::move(out));
    }
    case MessageKind::Update: {
      const wire::Update* u = env->message_as_Update();
      SHOAL_ASSIGN_OR_RETURN(UpdateReport report, DecodeUpdateReport(u));
      return Body(UpdateChunk{u->num_examples(), std::move(report), u->encoding(), ViewChunk(u->payload())});
    }
    case MessageKind::Resync: {
      const wire::Resync* r = env->message_as_Resync();
      SHOAL_RETURN_IF_ERROR(CheckString(r->have_hash(), "have_hash", false));
      return Body(Resync{StringOrEmpty(r->have_hash())});
    }
    case MessageKind::Ack:
      return Body(Ack{env->message_as_Ack()->accepted()});
    case MessageKind::Error: {
      const wire::Error* e = env->message_as_Error();
      SHOAL_RETURN_IF_ERROR(CheckString(e->reason(), "reason", false));
      return Body(ErrorReply{e->code(), StringOrEmpty(e->reason())});
    }
    case MessageKind::Heartbeat: {
      const wire::Heartbeat* h = env->message_as_Heartbeat();
      return Body(Heartbeat{h->busy(), h->progress()});
    }
    case MessageKind::Bye: {
      const wire::Bye* b = env->message_as_Bye();
      SHOAL_RETURN_IF_ERROR(CheckString(b->reason(), "reason", false));
      return Body(Bye{StringOrEmpty(b->reason())});
    }
    default:
      return Body(Other{env->message_type()});
  }
}

}  // namespace

const char* ErrorName(ErrorCode code) { return wire::EnumNameErrorCode(code); }

MessageKind KindOf(const Verified& frame) {
  return frame.envelope ? frame.envelope->message_type() : MessageKind::NONE;
}

StatusOr<Message> DecodeMessage(const Verified& frame) {
  const wire::Envelope* env = frame.envelope;
  if (!env) return Status::Protocol("frame was not verified");
  Message m;
  m.header = Header{env->session(), env->round(), env->sender(), env->sequence()};
  m.kind = env->message_type();
  SHOAL_ASSIGN_OR_RETURN(m.body, DecodeBody(env));
  return m;
}

}  // namespace shoal::protocol
