// Owning pointers to OpenSSL objects (freed with their own *_free), for the security library's
// files that use OpenSSL's C API. Must not: be used outside security/.
#pragma once

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <memory>

namespace baton::security {

template <class T, void (*Free)(T*)>
struct OpenSslFree {
  void operator()(T* p) const { Free(p); }
};

inline void free_bio(BIO* b) { BIO_free(b); }

using BioPtr = std::unique_ptr<BIO, OpenSslFree<BIO, free_bio>>;
using CertPtr = std::unique_ptr<X509, OpenSslFree<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, OpenSslFree<EVP_PKEY, EVP_PKEY_free>>;
using StorePtr = std::unique_ptr<X509_STORE, OpenSslFree<X509_STORE, X509_STORE_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, OpenSslFree<X509_STORE_CTX, X509_STORE_CTX_free>>;

}  // namespace baton::security
