// Post-processors of tokenizer.json, reduced to what single-sequence encoding needs: the list of
// special-token ids and the sequence placeholder (TemplateProcessing, RobertaProcessing,
// BertProcessing, ByteLevel, Sequence).
#include "pipeline.h"

#include "exl2/error.h"
#include "exl2/json.h"

namespace exl2 {
namespace tok {

namespace {

// ["<s>", 1] as used by Roberta/Bert processors.
Template::Item pair_item(const Json & j, const Where & w) {
    if (!j.is_array() || j.size() != 2 || !j[1].is_integer()) fail_at(w, "expected [token, id]");
    Template::Item it;
    it.ids.push_back((int32_t)j[1].as_int());
    return it;
}

}  // namespace

Template template_from_json(const Json & j, const Where & w) {
    Template t;
    if (j.is_null()) return t;
    if (!j.is_object()) fail_at(w, "expected an object");
    const std::string type = j.get_string("type", "");
    if (type == "TemplateProcessing") {
        const Json & single = j.get("single");
        const Json & specials = j.get("special_tokens");
        if (!single.is_array()) fail_at(w.at("single"), "expected an array");
        for (size_t i = 0; i < single.size(); i++) {
            const Json & e = single[i];
            Template::Item item;
            if (e.find("Sequence")) {
                item.is_sequence = true;
            } else if (const Json * st = e.find("SpecialToken")) {
                const std::string name = st->get_string("id", "");
                const Json * spec = specials.find(name);
                if (!spec) fail_at(w.at("single").at(i), "special token \"" + name + "\" missing from special_tokens");
                const Json & ids = spec->get("ids");
                if (!ids.is_array()) fail_at(w.at("special_tokens").at(name), "expected \"ids\" array");
                for (size_t k = 0; k < ids.size(); k++) {
                    if (!ids[k].is_integer()) fail_at(w.at("special_tokens").at(name), "ids must be integers");
                    item.ids.push_back((int32_t)ids[k].as_int());
                }
            } else {
                fail_at(w.at("single").at(i), "expected Sequence or SpecialToken");
            }
            t.single.push_back(std::move(item));
        }
        t.present = true;
        return t;
    }
    if (type == "RobertaProcessing" || type == "BertProcessing") {
        t.single.push_back(pair_item(j.get("cls"), w.at("cls")));
        Template::Item seq;
        seq.is_sequence = true;
        t.single.push_back(seq);
        t.single.push_back(pair_item(j.get("sep"), w.at("sep")));
        t.present = true;
        return t;
    }
    if (type == "ByteLevel") return t;
    if (type == "Sequence") {
        const Json & a = j.get("processors");
        if (!a.is_array()) fail_at(w.at("processors"), "expected an array");
        for (size_t i = 0; i < a.size(); i++) {
            Template sub = template_from_json(a[i], w.at("processors").at(i));
            if (sub.present) t = std::move(sub);
        }
        return t;
    }
    fail_at(w.at("type"), "unknown post_processor type \"" + type + "\"");
}

}  // namespace tok
}  // namespace exl2
